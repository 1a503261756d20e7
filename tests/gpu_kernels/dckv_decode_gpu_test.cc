// The CUDA dckv decoder against the CPU codec: payloads encoded by codec/dckv decode on
// the GPU to exactly the bytes of DckvCodec::Decode (tolerance zero; the GPU decoder
// also verifies the payload's content checksum itself). Artifacts fitted from the
// synthetic rows of tests/codec/dckv/dckv_test_data.h: plain PCA, token-conditioned with and
// without the checkerboard context model (payloads with and without token ids),
// weighted basis with an encoder scale, decoder correction nets; raw head/tail rows; chunk sizes 1, 2, odd,
// 32 +- 1, 100; token offsets 0 and > 0. Damaged streams, raw rows and checksums are
// Corruption, another model's payload Mismatch. The artifact check runs without a
// device; the rest skips visibly when there is none (scripts/gpu_check.sh runs it on a
// GPU machine).
#include "gpu_kernels/dckv_decode.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codec/dckv/dckv_codec.h"
#include "codec/entropy/rans_segments.h"
#include "kvstash/payload_format.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/gpu_kernels/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::gpu {
namespace {

using dckv::DckvArtifact;
using dckv::DckvCodec;

constexpr Digest256 kModel = {4, 5, 6};
constexpr size_t kHeaderBytes = 136;  // payload.md

// CPU and GPU decoders of one artifact.
struct Decoders {
  DckvCodec cpu;
  DeviceDckvDecoder gpu;
};

Result<Decoders> MakeDecoders(Result<DckvArtifact> made) {
  KVSTASH_ASSIGN_OR_RETURN(DckvArtifact artifact, std::move(made));
  KVSTASH_ASSIGN_OR_RETURN(DckvCodec cpu, DckvCodec::Create(artifact));
  KVSTASH_ASSIGN_OR_RETURN(DeviceDckvDecoder gpu, DeviceDckvDecoder::Create(artifact, nullptr));
  return Decoders{std::move(cpu), std::move(gpu)};
}

// Encodes tokens [offset, offset + len) of `rows` (with their ids when `ids`) and
// checks that both decoders return the same bytes.
void ExpectSameDecode(const Decoders& d, const dckv::DckvRows& rows, uint32_t offset, uint32_t len,
                      uint32_t prefix_tokens, bool ids, DType dtype) {
  const std::string what = "offset " + std::to_string(offset) + " tokens " + std::to_string(len) +
                           " prefix " + std::to_string(prefix_tokens) + (ids ? " ids" : " no ids");
  const KvChunk chunk = dckv::testing::MakeChunk(rows, offset, offset + len, dtype);
  std::span<const uint32_t> tokens;
  if (ids) tokens = std::span<const uint32_t>(rows.tokens.data() + offset, len);
  ASSERT_OK_AND_ASSIGN(auto payload, d.cpu.Encode(chunk.view(), tokens, offset, prefix_tokens, kModel));
  ASSERT_OK_AND_ASSIGN(KvChunk cpu, d.cpu.Decode(payload, kModel));
  auto gpu = d.gpu.Decode(payload, kModel, nullptr);
  ASSERT_TRUE(gpu.ok()) << what << ": " << gpu.status().ToString();
  EXPECT_TRUE(gpu->layout == cpu.layout) << what;
  EXPECT_EQ(gpu->tokens, cpu.tokens) << what;
  EXPECT_EQ(gpu->data, cpu.data) << what;
  // The device_out variant leaves the same verified bytes in device memory.
  testing::DeviceBuffer<uint8_t> dev(cpu.data.size());
  auto again = d.gpu.Decode(payload, kModel, nullptr, dev.get(), cpu.data.size());
  ASSERT_TRUE(again.ok()) << what << ": " << again.status().ToString();
  EXPECT_EQ(dev.ToHost(), cpu.data) << what;
}

TEST(DckvDecodeGpu, PlainArtifactDecodesLikeTheCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  const auto eval = dckv::testing::MakeRows(200, 1);
  for (uint32_t group_layers : {2u, 3u}) {  // groups of 2 + 1 layers, one group of 3
    ASSERT_OK_AND_ASSIGN(Decoders d, MakeDecoders(dckv::testing::PlainArtifact(6.0, group_layers)));
    for (uint32_t len : {1u, 2u, 7u, 31u, 32u, 33u, 100u}) {
      for (uint32_t offset : {0u, 9u}) {
        // Prefix 200: no tail in these chunks; prefix offset + len: raw tail rows.
        for (uint32_t prefix : {200u, offset + len}) {
          ExpectSameDecode(d, eval, offset, len, prefix, false, DType::kBF16);
        }
      }
    }
    ExpectSameDecode(d, eval, 5, 33, 200, false, DType::kF32);
  }
}

TEST(DckvDecodeGpu, ConditionedArtifactsDecodeLikeTheCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  const auto eval = dckv::testing::MakeConditionedRows(160, 1);
  for (bool checkerboard : {true, false}) {
    ASSERT_OK_AND_ASSIGN(const DckvArtifact a, dckv::testing::ConditionedArtifact(6.0, checkerboard));
    ASSERT_EQ(a.groups[0].context_map.empty(), !checkerboard);
    ASSERT_OK_AND_ASSIGN(Decoders d, MakeDecoders(a));
    for (uint32_t len : {1u, 2u, 7u, 8u, 31u, 32u, 33u, 100u}) {
      for (uint32_t offset : {0u, 1u, 40u}) {
        for (bool ids : {true, false}) ExpectSameDecode(d, eval, offset, len, 160, ids, DType::kBF16);
      }
    }
    ExpectSameDecode(d, eval, 50, 33, 83, true, DType::kBF16);  // with a raw tail
  }
}

TEST(DckvDecodeGpu, WeightedArtifactDecodesLikeTheCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  ASSERT_OK_AND_ASSIGN(const DckvArtifact a, dckv::testing::WeightedArtifact(4.0));
  ASSERT_FALSE(a.groups[0].encode_scale.empty());
  ASSERT_OK_AND_ASSIGN(Decoders d, MakeDecoders(a));
  const auto eval = dckv::testing::MakeRows(200, 3);
  for (uint32_t len : {1u, 33u, 100u}) ExpectSameDecode(d, eval, 17, len, 200, false, DType::kF32);
}

// The payload rebuilt around a changed body or header (body checksum recomputed).
std::vector<uint8_t> Rebuild(const std::vector<uint8_t>& payload, const std::vector<uint8_t>& body,
                             uint64_t checksum_xor) {
  auto h = ParsePayloadHeader(payload);
  EXPECT_OK(h.status());
  h->content_checksum ^= checksum_xor;
  auto p = BuildPayload(*h, body);
  EXPECT_OK(p.status());
  return std::move(p).value();
}

TEST(DckvDecodeGpu, DamageIsCorruptionAndAnotherModelIsMismatch) {
  KVSTASH_SKIP_WITHOUT_GPU();
  ASSERT_OK_AND_ASSIGN(Decoders d, MakeDecoders(dckv::testing::ConditionedArtifact(6.0, true)));
  const auto eval = dckv::testing::MakeConditionedRows(160, 2);
  const KvChunk chunk = dckv::testing::MakeChunk(eval, 0, 100, DType::kBF16);
  ASSERT_OK_AND_ASSIGN(auto payload,
                       d.cpu.Encode(chunk.view(), std::span<const uint32_t>(eval.tokens.data(), 100), 0, 160, kModel));
  ASSERT_OK(d.gpu.Decode(payload, kModel, nullptr).status());
  const std::vector<uint8_t> body(payload.begin() + kHeaderBytes, payload.end());
  ASSERT_OK_AND_ASSIGN(dckv::DckvParsedPayload parsed, d.cpu.SplitPayload(payload, kModel));
  ASSERT_EQ(parsed.q.raw_head_rows, 2u);
  const size_t stream_at = static_cast<size_t>(parsed.stream.data() - payload.data()) - kHeaderBytes;
  ASSERT_OK_AND_ASSIGN(entropy::SegmentDirectory dir, entropy::ParseSegmentDirectory(parsed.stream));

  // Every state of the last segment's header set to 0 (below 2^16): the kernel's check.
  std::vector<uint8_t> damaged = body;
  const size_t last = stream_at + dir.offsets[dir.num_segments() - 1];
  std::fill(damaged.begin() + static_cast<long>(last), damaged.begin() + static_cast<long>(last) + 128, 0);
  const auto bad_stream = Rebuild(payload, damaged, 0);
  EXPECT_STATUS(d.cpu.Decode(bad_stream, kModel), kCorruption);
  EXPECT_STATUS(d.gpu.Decode(bad_stream, kModel, nullptr), kCorruption);

  // A flipped bit in a raw row: only the content checksum can tell.
  damaged = body;
  damaged[stream_at - 1] ^= 0x01;
  const auto bad_raw = Rebuild(payload, damaged, 0);
  EXPECT_STATUS(d.cpu.Decode(bad_raw, kModel), kCorruption);
  EXPECT_STATUS(d.gpu.Decode(bad_raw, kModel, nullptr), kCorruption);

  // A wrong content checksum in the header.
  EXPECT_STATUS(d.gpu.Decode(Rebuild(payload, body, 1), kModel, nullptr), kCorruption);
  // device_out: a wrong size is refused before decoding; a chunk that decodes fully but
  // fails the content checksum never reaches it (NEVER scatter unverified bytes).
  const std::vector<uint8_t> sentinel(d.cpu.OutputLayout().DataBytes(100), 0xA5);
  testing::DeviceBuffer<uint8_t> dev(sentinel);
  EXPECT_STATUS(d.gpu.Decode(payload, kModel, nullptr, dev.get(), sentinel.size() - 2), kInvalidArgument);
  EXPECT_STATUS(d.gpu.Decode(Rebuild(payload, body, 1), kModel, nullptr, dev.get(), sentinel.size()), kCorruption);
  EXPECT_EQ(dev.ToHost(), sentinel);
  ASSERT_OK(d.gpu.Decode(payload, kModel, nullptr, dev.get(), sentinel.size()).status());
  EXPECT_EQ(dev.ToHost(), d.cpu.Decode(payload, kModel)->data);

  // A truncated stream (the directory no longer adds up), a truncated payload.
  damaged.assign(body.begin(), body.end() - 2);
  EXPECT_STATUS(d.gpu.Decode(Rebuild(payload, damaged, 0), kModel, nullptr), kCorruption);
  EXPECT_STATUS(d.gpu.Decode(std::span<const uint8_t>(payload).first(payload.size() - 1), kModel, nullptr),
                kCorruption);

  // Another model's fingerprint.
  Digest256 other = kModel;
  other[0] ^= 1;
  EXPECT_STATUS(d.gpu.Decode(payload, other, nullptr), kMismatch);
  // Another artifact's payload.
  ASSERT_OK_AND_ASSIGN(Decoders plain, MakeDecoders(dckv::testing::PlainArtifact(6.0, 2)));
  EXPECT_STATUS(plain.gpu.Decode(payload, kModel, nullptr), kMismatch);
}

// Decoder correction nets (random weights) in every group but one, whose last layer is
// zero, on the plain and the conditioned artifacts.
TEST(DckvDecodeGpu, DecoderNetsDecodeLikeTheCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  for (bool conditioned : {false, true}) {
    ASSERT_OK_AND_ASSIGN(DckvArtifact a, conditioned ? dckv::testing::ConditionedArtifact(6.0, true)
                                                     : dckv::testing::PlainArtifact(6.0, 2));
    for (size_t gi = 0; gi < a.groups.size(); ++gi) {
      dckv::DckvGroup& g = a.groups[gi];
      g.decoder_net = dckv::testing::RandomNet(gi == 0 ? 16 : 5, g.n_active(), g.dims, gi == 1 ? 0.0f : 2e-3f,
                                               40 + static_cast<uint32_t>(gi));
    }
    ASSERT_OK_AND_ASSIGN(Decoders d, MakeDecoders(std::move(a)));
    const auto eval =
        conditioned ? dckv::testing::MakeConditionedRows(160, 1) : dckv::testing::MakeRows(200, 1);
    for (uint32_t len : {1u, 2u, 7u, 33u, 100u}) {
      for (uint32_t offset : {0u, 9u}) ExpectSameDecode(d, eval, offset, len, 160, conditioned, DType::kBF16);
    }
  }
}

TEST(DckvDecodeGpuArgs, InconsistentArtifactIsInvalidArgumentWithoutTouchingTheDevice) {
  ASSERT_OK_AND_ASSIGN(DckvArtifact a, dckv::testing::PlainArtifact(6.0, 2));
  a.groups[0].mean.pop_back();
  EXPECT_STATUS(DeviceDckvDecoder::Create(a, nullptr), kInvalidArgument);
  a.tables = nullptr;
  EXPECT_STATUS(DeviceDckvDecoder::Create(a, nullptr), kInvalidArgument);
  // A malformed decoder correction net (dckv_correction.h CheckCorrectionNets: w2 one
  // value short).
  ASSERT_OK_AND_ASSIGN(DckvArtifact net, dckv::testing::PlainArtifact(6.0, 2));
  dckv::DckvGroup& g = net.groups[0];
  g.decoder_net = dckv::testing::RandomNet(3, g.n_active(), g.dims, 0.1f, 1);
  g.decoder_net.w2.pop_back();
  EXPECT_STATUS(DeviceDckvDecoder::Create(net, nullptr), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::gpu
