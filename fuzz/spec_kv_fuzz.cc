// Fuzzes the spec KV codec's two parsers of untrusted bytes (codec/spec/spec_artifact.h,
// codec/spec/spec_codec.h): the artifact a deployment loads, and the payload body a
// client decodes after a GET (a damaged T2 value, a faulty or hostile server).
// Input: byte 0 picks the mode (bit 0) and the dtype (bits 1-2: bf16, f16, fp8 e4m3,
// bf16).
// - Mode 0, artifact: the rest is an artifact without its XXH3-64 trailer, which the
//   fuzzer appends so that the field checks are reached. An artifact that parses must
//   serialise back to exactly its bytes, and must code a fixed 3-token chunk (every
//   value class: zeros, normals, subnormals, Inf, NaN) losslessly against a fixed
//   prediction: spec is lossless for any artifact it accepts.
// - Mode 1, payload: byte 1 gives the token count (1 + byte % 16), bytes 2..9 the
//   header's content checksum, the rest is the body. The fuzzer wraps it in a valid
//   header for a fixed calibrated artifact of that dtype (2 layers x 2 KV heads x 8)
//   and writes the fixed prediction's digest over the body's first 8 bytes (when there
//   are 8), so the stream sizes, scales and rANS streams are reached; it decodes on 1
//   and on 3 threads, which must agree. A chunk that decodes must re-encode and decode
//   back to itself (not always to the same bytes: a stream's segment length is the
//   encoder's choice, docs/format/rans.md).
// Any input must give a Status or a chunk, never a crash, an out-of-bounds access or an
// unbounded allocation. Seeds: KVSTASH_FUZZ_WRITE_SEEDS=<dir> (fuzz/seed_writer.h)
// writes an artifact and a 16- and a 5-token payload per dtype.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "codec/spec/spec_artifact.h"
#include "codec/spec/spec_calibration.h"
#include "codec/spec/spec_codec.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "fuzz/seed_writer.h"
#include "kvstash/dtype_bits.h"
#include "kvstash/payload_format.h"

namespace {

using namespace kvstash;

constexpr uint32_t kLayers = 2, kHeads = 2, kDim = 8, kMaxTokens = 16;
constexpr std::array<DType, 4> kDTypes = {DType::kBF16, DType::kF16, DType::kFP8E4M3, DType::kBF16};
constexpr float kFp8Scale = 0.05f;

// A fixed value in [-4, 4) from (i, salt): an LCG step, no library randomness.
float Value(uint64_t i, uint32_t salt) {
  uint32_t x = static_cast<uint32_t>(i) * 1664525u + salt * 1013904223u + 12345u;
  x ^= x >> 13;
  x *= 2246822519u;
  return static_cast<float>(static_cast<int32_t>(x >> 8) % 4096) / 1024.0f;
}

// The stored bits of v in dtype (fp8: v / kFp8Scale).
void Store(DType dtype, float v, uint8_t* out) {
  if (dtype == DType::kBF16) StoreLe<uint16_t>(out, F32ToBf16(v));
  if (dtype == DType::kF16) StoreLe<uint16_t>(out, F32ToF16(v));
  if (dtype == DType::kFP8E4M3) *out = F32ToFp8E4M3(v / kFp8Scale);
}

// A prediction of kMaxTokens tokens (mu per layer and K/V) and chunks near it.
struct Fixture {
  KvLayout layout;
  std::vector<std::vector<float>> k, v;  // [layer][kMaxTokens * kHeads * kDim]
  spec::SpecArtifact artifact;
  Digest256 artifact_digest{};
  std::vector<uint8_t> artifact_bytes;
  Digest256 model{};

  explicit Fixture(DType dtype) : layout{kLayers, kHeads, kDim, dtype} {
    const size_t n = layout.ScalarsPerTensor(kMaxTokens);
    k.assign(kLayers, std::vector<float>(n));
    v.assign(kLayers, std::vector<float>(n));
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (size_t i = 0; i < n; ++i) {
        k[l][i] = Value(i, 10 + l);
        v[l][i] = Value(i, 20 + l);
      }
    }
    model[0] = 0x5C;
    spec::CalibrationOptions o;
    o.contexts.dtype = dtype;
    o.contexts.buckets = 12;
    o.contexts.frac_bins = 2;
    o.predictor_variant = "fuzz";
    o.threads = 1;
    auto c = spec::SpecCalibrator::Create(layout, o).value();
    const KvChunk cal = Chunk(kMaxTokens, 1);
    if (!c.AddVariance(cal.view(), Prediction(kMaxTokens)).ok() || !c.FreezeSigma().ok() ||
        !c.AddHistogram(cal.view(), Prediction(kMaxTokens)).ok()) {
      std::abort();
    }
    artifact = c.Build().value();
    artifact_bytes = artifact.Serialize();
    artifact_digest = artifact.Digest();
  }

  spec::PredictedChunk Prediction(uint32_t tokens) const {
    spec::PredictedChunk p;
    p.tokens = tokens;
    for (uint32_t l = 0; l < kLayers; ++l) {
      p.k.push_back(k[l].data());
      p.v.push_back(v[l].data());
    }
    return p;
  }

  // The prediction plus small per-scalar residuals (salt varies them).
  KvChunk Chunk(uint32_t tokens, uint32_t salt) const {
    KvChunk c = KvChunk::Zeros(layout, tokens);
    const size_t n = layout.ScalarsPerTensor(tokens);
    const size_t w = DTypeSize(layout.dtype);
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (size_t i = 0; i < n; ++i) {
        Store(layout.dtype, k[l][i] + Value(i, salt) / 64.0f, c.MutableK(l).data() + w * i);
        Store(layout.dtype, v[l][i] + Value(i, salt + 7) / 64.0f, c.MutableV(l).data() + w * i);
      }
    }
    for (float& s : c.scales) s = kFp8Scale;
    return c;
  }
};

const Fixture& FixtureOf(uint8_t selector) {
  static const std::array<Fixture, 3> fx = {Fixture(DType::kBF16), Fixture(DType::kF16),
                                            Fixture(DType::kFP8E4M3)};
  const DType d = kDTypes[(selector >> 1) & 3];
  return fx[d == DType::kBF16 ? 0 : d == DType::kF16 ? 1 : 2];
}

// Mode 0: an accepted artifact round-trips and codes a chunk of every value class
// losslessly (a zero prediction of the artifact's own layout).
void FuzzArtifact(std::span<const uint8_t> rest) {
  std::vector<uint8_t> bytes(rest.begin(), rest.end());
  ByteWriter(&bytes).U64(Xxh3_64(rest));
  auto a = spec::SpecArtifact::Parse(bytes);
  if (!a.ok()) return;
  if (a->Serialize() != bytes) std::abort();  // accepted bytes must be canonical
  constexpr uint32_t kTokens = 3;
  const KvLayout& L = a->layout;
  KvChunk chunk = KvChunk::Zeros(L, kTokens);
  const std::array<uint16_t, 8> bits16 = {0x0000, 0x8000, 0x3F80, 0xC2F7, 0x0001, 0x7F80, 0x7FC1, 0xFFFF};
  for (size_t i = 0; i < chunk.data.size(); ++i) {
    chunk.data[i] = static_cast<uint8_t>(bits16[(i / 2) % bits16.size()] >> (8 * (i % 2)));
  }
  for (float& s : chunk.scales) s = kFp8Scale;
  const std::vector<float> zero(L.ScalarsPerTensor(kTokens), 0.0f);
  spec::PredictedChunk p;
  p.tokens = kTokens;
  for (uint32_t l = 0; l < L.n_layers; ++l) {
    p.k.push_back(zero.data());
    p.v.push_back(zero.data());
  }
  const Digest256 model{};
  auto payload = spec::EncodeSpecPayload(*a, chunk.view(), p, model, 0);
  if (!payload.ok()) return;  // e.g. a table that gives some symbol no probability
  auto back = spec::DecodeSpecPayload(*a, *payload, p, model);
  if (!back.ok() || back->data != chunk.data || back->scales != chunk.scales) std::abort();
}

// Mode 1: a body wrapped in a valid header of the fixture's artifact. Returns whether it
// decoded.
bool FuzzPayload(const Fixture& fx, std::span<const uint8_t> rest) {
  if (rest.size() < 9) return false;
  const uint32_t tokens = 1 + rest[0] % kMaxTokens;
  PayloadHeader h;
  h.codec = CodecId::kSpec;
  h.layout = fx.layout;
  h.tokens = tokens;
  h.artifact_digest = fx.artifact_digest;
  h.model_fingerprint = fx.model;
  h.content_checksum = LoadLe<uint64_t>(rest.data() + 1);
  std::vector<uint8_t> body(rest.begin() + 9, rest.end());
  const spec::PredictedChunk p = fx.Prediction(tokens);
  if (body.size() >= 8) StoreLe<uint64_t>(body.data(), p.Digest(fx.layout));
  auto payload = BuildPayload(h, body);
  if (!payload.ok()) std::abort();
  auto one = spec::DecodeSpecPayload(fx.artifact, fx.artifact_digest, *payload, p, fx.model, 1);
  auto three = spec::DecodeSpecPayload(fx.artifact, fx.artifact_digest, *payload, p, fx.model, 3);
  if (one.ok() != three.ok() || one.status().code() != three.status().code()) std::abort();
  if (!one.ok()) return false;
  if (one->data != three->data || one->scales != three->scales) std::abort();
  auto again = spec::EncodeSpecPayload(fx.artifact, fx.artifact_digest, one->view(), p, fx.model, 0);
  if (!again.ok()) std::abort();
  auto back = spec::DecodeSpecPayload(fx.artifact, fx.artifact_digest, *again, p, fx.model, 1);
  if (!back.ok() || back->data != one->data || back->scales != one->scales) std::abort();
  return true;
}

// The seed files: per dtype an artifact and a 16- and a 5-token payload, each payload
// checked to decode (so the seeds reach the end of the decoder).
void WriteSeeds(const std::string& dir) {
  for (uint8_t d = 0; d < 3; ++d) {
    const uint8_t selector = static_cast<uint8_t>(d << 1);
    const Fixture& fx = FixtureOf(selector);
    const std::string name = std::string(DTypeName(fx.layout.dtype));
    std::vector<uint8_t> art = {selector};
    art.insert(art.end(), fx.artifact_bytes.begin(), fx.artifact_bytes.end() - 8);
    fuzz::WriteSeed(dir, "artifact-" + name, art);
    for (uint32_t tokens : {kMaxTokens, 5u}) {
      const KvChunk c = fx.Chunk(tokens, tokens);
      auto payload = spec::EncodeSpecPayload(fx.artifact, c.view(), fx.Prediction(tokens), fx.model, 0).value();
      std::vector<uint8_t> seed = {static_cast<uint8_t>(selector | 1), static_cast<uint8_t>(tokens - 1)};
      ByteWriter(&seed).U64(c.ContentChecksum());
      seed.insert(seed.end(), payload.begin() + kPayloadHeaderBytesUnbound, payload.end());
      if (!FuzzPayload(fx, std::span<const uint8_t>(seed).subspan(1))) std::abort();
      fuzz::WriteSeed(dir, "payload-" + name + "-" + std::to_string(tokens), seed);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The calibrated fixtures are built here, not in the first input: under ASan on a
  // loaded machine their calibration took over -timeout=10 s and was reported as that
  // input's timeout.
  (void)FixtureOf(0);
  if (const std::string dir = fuzz::SeedFolder(); !dir.empty()) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    FuzzArtifact(rest);
  } else {
    FuzzPayload(FixtureOf(data[0]), rest);
  }
  return 0;
}
