// Fuzzes the dckv payload decoder (codec/dckv/dckv_codec.h) on untrusted bodies: what a
// client decodes after a GET (a damaged T2 value, a faulty or hostile server).
// Input: byte 0 picks the artifact (bits 0-1: the hand artifact; a calibrated one with
// token conditioning, the checkerboard context model and raw head/tail rows; the hand
// artifact with a decoder correction net; the hand artifact), the output dtype (bit 2:
// f16, else bf16) and whether to decode to fp8 as well (bit 3: bf16 payloads only, an
// f16 one must be refused); byte 1 the token count (1 + byte % 32), byte 2 the chunk's
// first position, bytes 3..10 the header's content checksum, the rest the body. The fuzzer wraps the body in a valid header for that
// artifact (codec, artifact digest, model, layout), so the body's row counts, token
// ids, raw rows and segmented rANS stream are reached. It decodes on 1 and on 3
// threads, which must agree in status and bytes.
// Any input must give a Status or a chunk, never a crash, an out-of-bounds access or an
// unbounded allocation. Seeds: KVSTASH_FUZZ_WRITE_SEEDS=<dir> (fuzz/seed_writer.h)
// writes an encoded 16-token (bf16, fp8 too) and 3-token (f16) payload per artifact.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_codec.h"
#include "common/byte_io.h"
#include "fuzz/seed_writer.h"
#include "kvstash/payload_format.h"
#include "tests/codec/dckv/dckv_hand_artifact.h"
#include "tests/codec/dckv/dckv_test_data.h"

namespace {

using namespace kvstash;
using dckv::DckvArtifact;
using dckv::DckvCodec;

constexpr uint32_t kMaxTokens = 32;
constexpr Digest256 kModel = {0xDC, 0x4B};

// The hand artifact with a decoder net per group (hidden 3, weights from HandValue).
DckvArtifact HandArtifactWithNet() {
  DckvArtifact a = dckv::testing::HandArtifact();
  constexpr uint32_t kHidden = 3;
  uint32_t salt = 40;
  for (auto& g : a.groups) {
    dckv::DckvNet& n = g.decoder_net;
    n.hidden = kHidden;
    n.w1.resize(static_cast<size_t>(kHidden) * g.n_active());
    n.b1.resize(kHidden);
    n.w2.resize(static_cast<size_t>(g.dims) * kHidden);
    n.b2.resize(g.dims);
    for (auto* v : {&n.w1, &n.b1, &n.w2, &n.b2}) {
      ++salt;
      for (size_t i = 0; i < v->size(); ++i) (*v)[i] = dckv::testing::HandValue(salt, static_cast<uint32_t>(i), 3) * 0.5f;
    }
  }
  return a;
}

// The three artifacts' codecs, each set to decode on 1 and on 3 threads.
struct Codecs {
  std::array<DckvCodec, 3> one, three;
  Codecs()
      : one{Create(dckv::testing::HandArtifact(), 1), Create(dckv::testing::ConditionedArtifact(6.0, true).value(), 1),
            Create(HandArtifactWithNet(), 1)},
        three{Create(one[0].artifact(), 3), Create(one[1].artifact(), 3), Create(one[2].artifact(), 3)} {}
  static DckvCodec Create(DckvArtifact a, uint32_t threads) {
    DckvCodec c = DckvCodec::Create(std::move(a)).value();
    c.set_threads(threads);
    return c;
  }
};

const DckvCodec& CodecOf(uint8_t selector, uint32_t threads = 1) {
  static const Codecs c;
  return (threads == 1 ? c.one : c.three)[(selector & 3) % 3];
}

// Decodes one input (see the file comment); returns whether the payload decoded.
bool DecodeInput(const uint8_t* data, size_t size) {
  if (size < 11) return false;
  const DckvCodec& codec = CodecOf(data[0]);
  PayloadHeader h;
  h.codec = CodecId::kDckv;
  h.flags = kPayloadFlagLossy;
  h.layout = codec.OutputLayout((data[0] & 4) ? DType::kF16 : DType::kBF16);
  h.tokens = 1 + data[1] % kMaxTokens;
  h.token_offset = data[2];
  h.artifact_digest = codec.digest();
  h.model_fingerprint = kModel;
  h.content_checksum = LoadLe<uint64_t>(data + 3);
  auto payload = BuildPayload(h, std::span<const uint8_t>(data + 11, size - 11));
  if (!payload.ok()) std::abort();
  auto one = codec.Decode(*payload, kModel);
  auto other = CodecOf(data[0], 3).Decode(*payload, kModel);
  if (one.ok() != other.ok() || one.status().code() != other.status().code()) std::abort();
  if (one.ok() && one->data != other->data) std::abort();
  if (data[0] & 8) {
    // bf16 payloads: the same checks, then a conversion. f16 ones always fail, with
    // InvalidArgument when the payload itself is sound.
    auto fp8 = codec.DecodeFp8(*payload, kModel);
    const bool f16 = h.layout.dtype == DType::kF16;
    if (f16 ? fp8.ok() || (one.ok() && !fp8.status().IsInvalidArgument()) : fp8.ok() != one.ok()) std::abort();
  }
  return one.ok();
}

// The conditioned rows the calibrated artifact was fitted to (stream 1: unseen), with
// their token ids; the hand artifacts take the same values. Each seed is checked to
// decode (so the seeds reach the end of the decoder).
void WriteSeeds(const std::string& dir) {
  const dckv::DckvRows rows = dckv::testing::MakeConditionedRows(64, 1);
  const char* names[] = {"hand", "conditioned", "net"};
  for (uint8_t a = 0; a < 3; ++a) {
    const DckvCodec& codec = CodecOf(a);
    const bool ids = codec.artifact().conditioning.rank > 0;
    for (uint32_t tokens : {16u, 3u}) {
      // 16 tokens from position 0 in bf16, decoded to fp8 too; 3 from position 9 in f16.
      const uint32_t offset = tokens == 16 ? 0 : 9;
      const DType dtype = tokens == 16 ? DType::kBF16 : DType::kF16;
      const uint8_t selector = static_cast<uint8_t>(tokens == 16 ? a | 8 : a | 4);
      const KvChunk chunk = dckv::testing::MakeChunk(rows, offset, offset + tokens, dtype);
      const std::span<const uint32_t> token_ids =
          ids ? std::span<const uint32_t>(rows.tokens).subspan(offset, tokens) : std::span<const uint32_t>();
      auto payload = codec.Encode(chunk.view(), token_ids, offset, 64, kModel).value();
      const PayloadHeader h = ParsePayloadHeader(payload).value();
      std::vector<uint8_t> seed = {selector, static_cast<uint8_t>(tokens - 1), static_cast<uint8_t>(offset)};
      ByteWriter(&seed).U64(h.content_checksum);
      seed.insert(seed.end(), payload.begin() + kPayloadHeaderBytesUnbound, payload.end());
      if (!DecodeInput(seed.data(), seed.size())) std::abort();
      fuzz::WriteSeed(dir, std::string(names[a]) + "-" + std::to_string(tokens), seed);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)CodecOf(0);  // the codecs are built here, not timed as the first input's work
  if (const std::string dir = fuzz::SeedFolder(); !dir.empty()) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)DecodeInput(data, size);
  return 0;
}
