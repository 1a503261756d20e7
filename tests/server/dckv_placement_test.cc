// Codec placement on the server: a tenant's dckv artifact encodes raw PUTs server-side
// and GET decodes on request (split from server_unit_test.cc).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "protocol/messages.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/payload_memory.h"
#include "server/request_handler.h"
#include "server/tenant_codecs.h"
#include "server/tenants.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/server/memory_chunk_store.h"
#include "tests/server/test_payloads.h"
#include "tests/support/test_util.h"

namespace kvstash::server {
namespace {

using protocol::Frame;
using protocol::Opcode;
using testing::Key;
using testing::Bound;
using testing::RawPayload;

// Codec placement with dckv: a small artifact calibrated on the dckv tests' synthetic
// rows (mechanics only; real-model rates come from `kvstash-bench codec`), written to
// a file and configured for tenant "a" with its digest.
class DckvPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rows_ = dckv::testing::MakeRows(2048, 0);
    auto basis = dckv::FitDckvBasis(rows_, 2);
    ASSERT_OK(basis.status());
    dckv::DckvRateOptions o;
    o.target_ratio = 6;
    o.raw_head = 4;
    o.raw_tail = 8;
    auto artifact = dckv::MakeDckvArtifact(*basis, o);
    ASSERT_OK(artifact.status());
    path_ = ::testing::TempDir() + "kvstash-dckv-" + std::to_string(getpid()) + ".dckv";
    const std::vector<uint8_t> bytes = artifact->Serialize();
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    sha_ = ToHex(artifact->Digest());
    auto codec = dckv::DckvCodec::Create(std::move(artifact).value());
    ASSERT_OK(codec.status());
    reference_ = std::make_unique<dckv::DckvCodec>(std::move(codec).value());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // Tokens [begin, end) of a held-out stream as a codec-raw payload (bf16, K roped).
  std::vector<uint8_t> RawChunkPayload(uint32_t begin, uint32_t end, KvChunk* chunk_out) {
    const dckv::DckvRows text = dckv::testing::MakeRows(256, 7);
    KvChunk c = dckv::testing::MakeChunk(text, begin, end, DType::kBF16);
    PayloadHeader h{.codec = CodecId::kRaw, .layout = c.layout, .tokens = c.tokens,
                    .token_offset = begin, .model_fingerprint = kModel,
                    .content_checksum = c.ContentChecksum()};
    *chunk_out = c;
    return BuildPayload(h, c.data).value();
  }

  static constexpr Digest256 kModel = {1, 2, 3};
  dckv::DckvRows rows_;
  std::string path_, sha_;
  std::unique_ptr<dckv::DckvCodec> reference_;
};

std::pair<Status, std::vector<uint8_t>> HandleOne(RequestHandler& h, const std::string& tenant,
                                                  Opcode op, uint16_t flags,
                                                  std::vector<uint8_t> body) {
  Frame f;
  f.header.opcode = static_cast<uint8_t>(op);
  f.header.flags = flags;
  f.header.request_id = 5;
  f.body = std::move(body);
  const std::vector<uint8_t> out = h.Handle(tenant, f).Flatten();
  std::vector<uint8_t> reply(out.begin() + 32, out.end());
  return {Status::FromCode(out[24], std::string(reply.begin(), reply.end())), reply};
}

TEST_F(DckvPlacementTest, ArtifactIsLoadedOnlyWithItsDigest) {
  ASSERT_OK(TenantCodecs::Load({{"a", "pa", "", path_, sha_}}).status());
  std::string wrong = sha_;
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  EXPECT_STATUS(TenantCodecs::Load({{"a", "pa", "", path_, wrong}}), kInvalidArgument);
  EXPECT_STATUS(TenantCodecs::Load({{"a", "pa", "", path_ + ".missing", sha_}}), kInvalidArgument);
  // A folder is refused with a status (reading it used to throw and abort the server).
  const std::string dir = path_ + ".d";
  std::filesystem::create_directories(dir);
  EXPECT_STATUS(TenantCodecs::Load({{"a", "pa", "", dir, sha_}}), kInvalidArgument);
  EXPECT_STATUS(LoadServerConfig(dir), kIOError);
  std::filesystem::remove(dir);
  ServerConfig c;
  c.tenants = {{"a", "pa", "", path_, ""}};
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // the digest is required
  auto parsed = ParseServerConfig(nlohmann::json::parse(
      R"({"tenants":[{"name":"a","credential":"x","dckv_artifact":"f.dckv","dckv_artifact_sha256":")" +
      sha_ + R"("}]})"));
  ASSERT_OK(parsed.status());
  EXPECT_EQ(parsed->tenants[0].dckv_artifact, "f.dckv");
}

TEST_F(DckvPlacementTest, RawKvIsEncodedWithTheTenantsArtifactAndDecodedOnRequest) {
  ASSERT_OK_AND_ASSIGN(TenantCodecs codecs, TenantCodecs::Load({{"a", "pa", "", path_, sha_}}));
  auto tenants = TenantTable::Create({{"a", "pa", ""}, {"b", "pb", ""}}).value();
  testing::MemoryChunkStore store;
  Metrics metrics;
  RequestHandler handler(&store, &tenants, &metrics, HandlerLimits{"n1", 1u << 24, 16}, &codecs);

  KvChunk chunk;
  protocol::PutRequest put;
  put.key = Key(1);
  put.payload = Bound(RawChunkPayload(0, 40, &chunk), Key(1));
  put.raw_kv = true;
  put.target_codec = CodecId::kDckv;
  put.prefix_tokens = 200;  // the prefix goes on: no raw tail in this chunk
  std::vector<uint8_t> body;
  put.Encode(&body);
  auto [s, reply] = HandleOne(handler, "a", Opcode::kPut, put.Flags(), body);
  ASSERT_OK(s);
  // What is stored is exactly the dckv encoder's payload for this chunk, bound to its key.
  const std::vector<uint8_t> want =
      Bound(reference_->Encode(chunk.view(), 0, 200, kModel).value(), Key(1));
  ASSERT_OK_AND_ASSIGN(std::optional<ChunkRead> stored, store.Get(ScopeKey("a", Key(1))));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(std::vector<uint8_t>(stored->payload->begin(), stored->payload->end()), want);
  EXPECT_EQ(protocol::PutReply::Decode(0, reply).value().stored_bytes, want.size());
  {  // Request memory of server-side dckv: chunk [0, 40) of a 40-token prefix keeps
     // 4 head (raw_head) + 8 tail (raw_tail) positions raw, each 2 x 3 layers x 2 heads
     // x 8 dims x 2 bytes = 192: 2304 bytes. Decoded GET: all 40 positions, 7680 bytes.
    protocol::PutRequest end = put;
    end.key = Key(2);
    end.payload = Bound(RawChunkPayload(0, 40, &chunk), Key(2));
    end.prefix_tokens = 40;
    end.memory = true;
    std::vector<uint8_t> end_body;
    end.Encode(&end_body);
    Frame f;
    f.header.opcode = static_cast<uint8_t>(Opcode::kPut);
    f.header.flags = end.Flags();
    f.body = end_body;
    const std::vector<uint8_t> out = handler.Handle("a", f).Flatten();
    ASSERT_EQ(out[24], 0) << std::string(out.begin() + 32, out.end());
    const uint16_t flags = LoadLe<uint16_t>(out.data() + 6);
    auto r = protocol::PutReply::Decode(flags, std::span<const uint8_t>(out).subspan(32)).value();
    const std::vector<uint8_t> want_end =
        Bound(reference_->Encode(chunk.view(), 0, 40, kModel).value(), Key(2));
    EXPECT_EQ(r.stored_bytes, want_end.size());
    EXPECT_EQ(r.memory, (protocol::ReplyMemory{12, 2304, 0}));
    // The codec's own parse agrees on the split.
    uint32_t offset = 0;
    auto q = reference_->ParsePayload(want_end, kModel, &offset).value();
    EXPECT_EQ(q.raw_head_rows + q.raw_tail_rows, 12u);
    protocol::GetRequest g{Key(2), /*decoded=*/true, false, /*memory=*/true};
    f.header.opcode = static_cast<uint8_t>(Opcode::kGet);
    f.header.flags = g.Flags();
    f.body.clear();
    g.Encode(&f.body);
    const std::vector<uint8_t> gout = handler.Handle("a", f).Flatten();
    ASSERT_EQ(gout[24], 0);
    auto gr = protocol::GetReply::Decode(LoadLe<uint16_t>(gout.data() + 6),
                                         std::span<const uint8_t>(gout).subspan(32)).value();
    EXPECT_EQ(gr.memory, (protocol::ReplyMemory{40, 7680, 0}));
    EXPECT_EQ(gr.payload.size(), 152u + 7680);  // decoded, still bound to Key(2)
  }
  EXPECT_LT(want.size(), put.payload.size());
  EXPECT_EQ(handler.TenantStatsJson("a")["codecs"]["dckv"]["chunks"], 2);  // Key(1), Key(2)

  // GET: as stored, or decoded on the server to a codec-raw payload.
  std::vector<uint8_t> get_body;
  protocol::GetRequest get{Key(1), /*decoded=*/true};
  get.Encode(&get_body);
  auto [gs, greply] = HandleOne(handler, "a", Opcode::kGet, get.Flags(), get_body);
  ASSERT_OK(gs);
  auto g = protocol::GetReply::DecodeOwned(0, std::vector<uint8_t>(greply)).value();
  ASSERT_OK_AND_ASSIGN(PayloadView raw, ParsePayload(g.payload));
  EXPECT_EQ(raw.header.codec, CodecId::kRaw);
  EXPECT_EQ(raw.header.tokens, 40u);
  EXPECT_EQ(raw.header.model_fingerprint, kModel);
  EXPECT_NE(raw.header.flags & kPayloadFlagLossy, 0);
  const KvChunk decoded = reference_->Decode(want, kModel).value();
  EXPECT_EQ(std::vector<uint8_t>(raw.body.begin(), raw.body.end()), decoded.data);
  EXPECT_EQ(raw.header.content_checksum, decoded.ContentChecksum());

  // Tenant b has no artifact; spec is never coded on the server.
  auto [sb, rb] = HandleOne(handler, "b", Opcode::kPut, put.Flags(), body);
  EXPECT_STATUS(sb, kNotSupported);
  protocol::PutRequest spec = put;
  spec.target_codec = CodecId::kSpec;
  std::vector<uint8_t> spec_body;
  spec.Encode(&spec_body);
  auto [ss, rs] = HandleOne(handler, "a", Opcode::kPut, spec.Flags(), spec_body);
  EXPECT_STATUS(ss, kNotSupported);
  EXPECT_NE(ss.message().find("where the model runs"), std::string::npos) << ss.message();
  // A prefix that ends before the chunk does is refused.
  protocol::PutRequest short_prefix = put;
  short_prefix.prefix_tokens = 10;
  std::vector<uint8_t> short_body;
  short_prefix.Encode(&short_body);
  EXPECT_STATUS(HandleOne(handler, "a", Opcode::kPut, short_prefix.Flags(), short_body).first,
                kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::server
