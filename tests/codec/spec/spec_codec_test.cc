// Mechanics of the spec codec on a small layout: exact round trip for every bf16, f16 and
// fp8 bit pattern (NaN, Inf, -0 included), whatever the prediction; Mismatch for a
// different prediction, artifact or model; Corruption for damaged payloads; artifact
// serialisation. (Compression figures on the real model: kvstash-bench codec.)
#include "codec/spec/spec_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "codec/spec/spec_calibration.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "common/worker_threads.h"
#include "tests/support/test_util.h"

namespace kvstash::spec {
namespace {

constexpr uint32_t kLayers = 2, kHeads = 2, kDim = 8;

struct Fixture {
  KvLayout layout;
  std::vector<KvChunk> chunks;
  std::vector<std::vector<std::vector<float>>> pred_k, pred_v;  // [chunk][layer][T*H*D]

  PredictedChunk Prediction(size_t c) const {
    PredictedChunk p;
    p.tokens = chunks[c].tokens;
    for (uint32_t l = 0; l < kLayers; ++l) {
      p.k.push_back(pred_k[c][l].data());
      p.v.push_back(pred_v[c][l].data());
    }
    return p;
  }
};

// True values = prediction + Gaussian noise of a per-channel spread; the last chunk
// has every bit pattern of the dtype (specials) in it instead.
Fixture MakeFixture(DType dtype, uint32_t tokens, int n_chunks, uint32_t seed) {
  Fixture f;
  f.layout = {kLayers, kHeads, kDim, dtype};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const size_t n = f.layout.ScalarsPerTensor(tokens);
  uint32_t pattern = 0;
  for (int c = 0; c < n_chunks; ++c) {
    KvChunk ch = KvChunk::Zeros(f.layout, tokens);
    f.pred_k.emplace_back();
    f.pred_v.emplace_back();
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<float> mu(n), x(n);
        for (size_t i = 0; i < n; ++i) {
          mu[i] = 3.0f * g(rng);
          x[i] = mu[i] + 0.01f * static_cast<float>(1 + i % kDim) * g(rng);
        }
        auto t = kv == 0 ? ch.MutableK(l) : ch.MutableV(l);
        const float scale = 0.05f;
        if (dtype == DType::kFP8E4M3) ch.scales[2 * l + kv] = scale;
        for (size_t i = 0; i < n; ++i) {
          const bool special = c == n_chunks - 1;
          if (dtype == DType::kBF16) {
            const uint16_t b = special ? static_cast<uint16_t>(pattern++) : F32ToBf16(x[i]);
            StoreLe<uint16_t>(t.data() + 2 * i, b);
          } else if (dtype == DType::kF16) {
            const uint16_t b = special ? static_cast<uint16_t>(pattern++) : F32ToF16(x[i]);
            StoreLe<uint16_t>(t.data() + 2 * i, b);
          } else {
            t[i] = special ? static_cast<uint8_t>(pattern++) : F32ToFp8E4M3(x[i] / scale);
          }
        }
        (kv == 0 ? f.pred_k : f.pred_v).back().push_back(mu);
      }
    }
    f.chunks.push_back(std::move(ch));
  }
  return f;
}

SpecArtifact Calibrate(const Fixture& f, size_t n_cal) {
  CalibrationOptions o;
  o.contexts.dtype = f.layout.dtype;
  o.contexts.buckets = 24;
  o.predictor_variant = "test";
  auto c = SpecCalibrator::Create(f.layout, o);
  EXPECT_OK(c.status());
  for (size_t i = 0; i < n_cal; ++i) EXPECT_OK(c->AddVariance(f.chunks[i].view(), f.Prediction(i)));
  EXPECT_OK(c->FreezeSigma());
  for (size_t i = 0; i < n_cal; ++i) EXPECT_OK(c->AddHistogram(f.chunks[i].view(), f.Prediction(i)));
  auto a = c->Build();
  EXPECT_OK(a.status());
  return std::move(a).value();
}

class SpecCodecTest : public ::testing::TestWithParam<DType> {};

TEST_P(SpecCodecTest, LosslessForEveryBitPatternAndCompresses) {
  const DType dtype = GetParam();
  // 256 tokens x 2 heads x 8 = 4096 scalars per tensor: the special chunk walks all
  // 65,536 bf16 patterns over its 16 tensors... (4 tensors x 4096), fp8 all 256 many times.
  Fixture f = MakeFixture(dtype, 256, 4, 1);
  const SpecArtifact art = Calibrate(f, 2);
  Digest256 model{};
  model[0] = 9;
  size_t stored = 0, raw = 0;
  for (size_t c = 2; c < f.chunks.size(); ++c) {
    ASSERT_OK_AND_ASSIGN(auto payload, EncodeSpecPayload(art, f.chunks[c].view(), f.Prediction(c), model, 0));
    ASSERT_OK_AND_ASSIGN(KvChunk back, DecodeSpecPayload(art, payload, f.Prediction(c), model));
    EXPECT_EQ(back.data, f.chunks[c].data) << "chunk " << c;
    EXPECT_EQ(back.scales, f.chunks[c].scales);
    if (c == 2) {
      stored += payload.size();
      raw += f.chunks[c].data.size();
    }
  }
  // The noise is far below the spread of the values: a real saving on chunk 2.
  EXPECT_LT(stored, raw * 0.8) << stored << " vs raw " << raw;
}

// The streams are coded on threads: the payload bytes, the decoded chunk and the
// error of a damaged payload do not depend on the count (1, 2, 3 = odd split of the
// 4 streams, 8 > streams); the calibration's Build gives the same artifact on 1 or 3.
TEST_P(SpecCodecTest, ThreadCountChangesNoByte) {
  const DType dtype = GetParam();
  Fixture f = MakeFixture(dtype, 100, 3, 7);
  const SpecArtifact art = Calibrate(f, 2);
  Digest256 model{};
  model[0] = 3;
  for (size_t c = 1; c < f.chunks.size(); ++c) {
    ASSERT_OK_AND_ASSIGN(auto one, EncodeSpecPayload(art, f.chunks[c].view(), f.Prediction(c), model, 0, 1));
    for (int threads : {0, 2, 3, 8}) {
      SCOPED_TRACE(threads);
      ASSERT_OK_AND_ASSIGN(auto many,
                           EncodeSpecPayload(art, f.chunks[c].view(), f.Prediction(c), model, 0, threads));
      EXPECT_EQ(many, one);
      ASSERT_OK_AND_ASSIGN(KvChunk back, DecodeSpecPayload(art, one, f.Prediction(c), model, threads));
      EXPECT_EQ(back.data, f.chunks[c].data);
      EXPECT_EQ(back.scales, f.chunks[c].scales);
      // A byte flipped near the end (last stream): the same Corruption for every count.
      auto bad = one;
      bad[bad.size() - 5] ^= 0x10;
      const auto want = DecodeSpecPayload(art, bad, f.Prediction(c), model, 1);
      const auto got = DecodeSpecPayload(art, bad, f.Prediction(c), model, threads);
      ASSERT_FALSE(want.ok());
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().ToString(), want.status().ToString());
    }
  }
  CalibrationOptions o;
  o.contexts.dtype = dtype;
  o.contexts.buckets = 24;
  o.predictor_variant = "test";
  std::vector<std::vector<uint8_t>> built;
  for (int threads : {1, 3}) {
    o.threads = threads;
    ASSERT_OK_AND_ASSIGN(auto cb, SpecCalibrator::Create(f.layout, o));
    for (size_t i = 0; i < 2; ++i) ASSERT_OK(cb.AddVariance(f.chunks[i].view(), f.Prediction(i)));
    ASSERT_OK(cb.FreezeSigma());
    for (size_t i = 0; i < 2; ++i) ASSERT_OK(cb.AddHistogram(f.chunks[i].view(), f.Prediction(i)));
    ASSERT_OK_AND_ASSIGN(auto a, cb.Build());
    built.push_back(a.Serialize());
  }
  EXPECT_EQ(built[0], built[1]);
}

// The OS refusing worker threads (EAGAIN under thread pressure; found by spec_kv_fuzz
// when the machine ran out of threads) must neither abort the process nor change a byte:
// the refused workers' streams run on the calling thread.
TEST_P(SpecCodecTest, RefusedWorkerThreadsChangeNoByte) {
  Fixture f = MakeFixture(GetParam(), 60, 2, 11);
  const SpecArtifact art = Calibrate(f, 1);
  Digest256 model{};
  model[0] = 5;
  ASSERT_OK_AND_ASSIGN(auto one, EncodeSpecPayload(art, f.chunks[1].view(), f.Prediction(1), model, 0, 1));
  const uint64_t failures = ThreadSpawnFailures();
  for (int allow : {0, 1}) {  // no thread at all; one thread, then a refusal
    SCOPED_TRACE(allow);
    RefuseThreadSpawnsForTesting(allow, 1);
    ASSERT_OK_AND_ASSIGN(auto many, EncodeSpecPayload(art, f.chunks[1].view(), f.Prediction(1), model, 0, 4));
    EXPECT_EQ(many, one);
    RefuseThreadSpawnsForTesting(allow, 1);
    ASSERT_OK_AND_ASSIGN(KvChunk back, DecodeSpecPayload(art, one, f.Prediction(1), model, 4));
    EXPECT_EQ(back.data, f.chunks[1].data);
    EXPECT_EQ(back.scales, f.chunks[1].scales);
  }
  EXPECT_EQ(ThreadSpawnFailures(), failures + 4);
}

TEST_P(SpecCodecTest, DifferentPredictionArtifactOrModelIsMismatch) {
  Fixture f = MakeFixture(GetParam(), 64, 3, 2);
  const SpecArtifact art = Calibrate(f, 2);
  Digest256 model{};
  ASSERT_OK_AND_ASSIGN(auto payload, EncodeSpecPayload(art, f.chunks[2].view(), f.Prediction(2), model, 0));
  // One ulp in one predicted value (a predictor with one perturbed weight would differ
  // in many).
  Fixture g = f;
  g.pred_v[2][1][17] = std::nextafter(g.pred_v[2][1][17], 1e9f);
  EXPECT_STATUS(DecodeSpecPayload(art, payload, g.Prediction(2), model), kMismatch);
  Digest256 other_model{};
  other_model[31] = 1;
  EXPECT_STATUS(DecodeSpecPayload(art, payload, f.Prediction(2), other_model), kMismatch);
  SpecArtifact other = art;
  other.log2_sigma[0] += 1.0f;
  EXPECT_STATUS(DecodeSpecPayload(other, payload, f.Prediction(2), model), kMismatch);
}

// The forms that take the artifact digest from the caller write and check the same
// bytes as the forms that compute it; a digest that is not the artifact's is Mismatch.
TEST_P(SpecCodecTest, CallerDigestFormsEqualTheComputingForms) {
  Fixture f = MakeFixture(GetParam(), 64, 3, 4);
  const SpecArtifact art = Calibrate(f, 2);
  const Digest256 digest = art.Digest();
  Digest256 model{};
  ASSERT_OK_AND_ASSIGN(auto want, EncodeSpecPayload(art, f.chunks[2].view(), f.Prediction(2), model, 64));
  ASSERT_OK_AND_ASSIGN(auto got,
                       EncodeSpecPayload(art, digest, f.chunks[2].view(), f.Prediction(2), model, 64));
  EXPECT_EQ(got, want);
  ASSERT_OK_AND_ASSIGN(KvChunk back, DecodeSpecPayload(art, digest, got, f.Prediction(2), model));
  EXPECT_EQ(back.data, f.chunks[2].data);
  ASSERT_OK(SplitSpecPayload(art, digest, got, f.Prediction(2), model).status());
  Digest256 wrong = digest;
  wrong[0] ^= 1;
  EXPECT_STATUS(DecodeSpecPayload(art, wrong, got, f.Prediction(2), model), kMismatch);
  EXPECT_STATUS(SplitSpecPayload(art, wrong, got, f.Prediction(2), model).status(), kMismatch);
  ASSERT_OK_AND_ASSIGN(auto stamped,
                       EncodeSpecPayload(art, wrong, f.chunks[2].view(), f.Prediction(2), model, 64));
  EXPECT_STATUS(DecodeSpecPayload(art, stamped, f.Prediction(2), model), kMismatch);
}

TEST_P(SpecCodecTest, DamagedPayloadsAreCorruptionNeverWrongKv) {
  Fixture f = MakeFixture(GetParam(), 64, 3, 3);
  const SpecArtifact art = Calibrate(f, 2);
  Digest256 model{};
  ASSERT_OK_AND_ASSIGN(auto payload, EncodeSpecPayload(art, f.chunks[2].view(), f.Prediction(2), model, 0));
  std::mt19937 rng(4);
  for (int i = 0; i < 300; ++i) {
    auto bad = payload;
    const size_t at = 136 + rng() % (bad.size() - 136);
    bad[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    // Re-seal the body checksum so the damage reaches the decoder itself.
    StoreLe<uint64_t>(bad.data() + 120, Xxh3_64(std::span(bad).subspan(136)));
    StoreLe<uint32_t>(bad.data() + 128, Crc32c(std::span(bad).first(128)));
    auto r = DecodeSpecPayload(art, bad, f.Prediction(2), model);
    if (r.ok()) {
      EXPECT_EQ(r->data, f.chunks[2].data) << "a decode that succeeds must be exact";
    } else {
      EXPECT_TRUE(r.status().IsCorruption() || r.status().IsMismatch()) << r.status().ToString();
    }
  }
  EXPECT_STATUS(DecodeSpecPayload(art, std::span(payload).first(payload.size() - 1), f.Prediction(2), model),
                kCorruption);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SpecCodecTest, ::testing::Values(DType::kBF16, DType::kF16, DType::kFP8E4M3),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// The special chunk of 1,024 tokens has 4 tensors x 16,384 scalars: exactly the 65,536
// f16 bit patterns (NaNs, +-Inf, -0, subnormals), each once, against a Gaussian
// prediction. All decode bit-exactly.
TEST(SpecCodecF16Test, EveryF16BitPatternRoundTrips) {
  Fixture f = MakeFixture(DType::kF16, 1024, 3, 21);
  const SpecArtifact art = Calibrate(f, 2);
  EXPECT_EQ(art.layout.dtype, DType::kF16);
  std::set<uint16_t> patterns;
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (auto t : {f.chunks[2].view().K(l), f.chunks[2].view().V(l)}) {
      for (size_t i = 0; i < t.size(); i += 2) patterns.insert(LoadLe<uint16_t>(t.data() + i));
    }
  }
  ASSERT_EQ(patterns.size(), 65536u);
  Digest256 model{};
  ASSERT_OK_AND_ASSIGN(auto payload, EncodeSpecPayload(art, f.chunks[2].view(), f.Prediction(2), model, 0));
  ASSERT_OK_AND_ASSIGN(KvChunk back, DecodeSpecPayload(art, payload, f.Prediction(2), model));
  EXPECT_EQ(back.data, f.chunks[2].data);
  // A serialised f16 artifact parses back to the same digest.
  ASSERT_OK_AND_ASSIGN(SpecArtifact again, SpecArtifact::Parse(art.Serialize()));
  EXPECT_EQ(again.Digest(), art.Digest());
}

TEST(SpecArtifactTest, SerialiseParseAndReject) {
  Fixture f = MakeFixture(DType::kFP8E4M3, 32, 2, 5);
  const SpecArtifact a = Calibrate(f, 1);
  const auto bytes = a.Serialize();
  ASSERT_OK_AND_ASSIGN(SpecArtifact b, SpecArtifact::Parse(bytes));
  EXPECT_EQ(b.Serialize(), bytes);
  EXPECT_EQ(b.Digest(), a.Digest());
  for (size_t i = 0; i < bytes.size(); i += 7) {
    auto bad = bytes;
    bad[i] ^= 0x20;
    EXPECT_FALSE(SpecArtifact::Parse(bad).ok()) << i;
  }
  EXPECT_STATUS(SpecArtifact::Parse(std::span(bytes).first(bytes.size() / 2)), kCorruption);
}

// A parsed artifact must be canonical (fuzz/spec_kv_fuzz asserts Serialize(Parse(b)) == b):
// a nonzero reserved byte (offset 7, docs/format/spec.md "u8 0") is refused even with a
// valid trailer, or two files would have one digest.
TEST(SpecArtifactTest, NonzeroReservedByteIsCorruption) {
  Fixture f = MakeFixture(DType::kBF16, 32, 2, 5);
  auto bytes = Calibrate(f, 1).Serialize();
  bytes.resize(bytes.size() - 8);
  bytes[7] = 1;
  ByteWriter(&bytes).U64(Xxh3_64(bytes));
  EXPECT_STATUS(SpecArtifact::Parse(bytes), kCorruption);
}

// buckets x frac_bins is checked in 64 bits: 65537 x 65536 wraps to 65536 in 32.
TEST(SpecContextTest, TableCountThatWrapsIsInvalid) {
  ContextConfig cfg;
  cfg.buckets = 65537;
  cfg.frac_bins = 65536;
  EXPECT_STATUS(cfg.Validate(), kInvalidArgument);
  cfg.buckets = 256;
  cfg.frac_bins = 256;
  EXPECT_OK(cfg.Validate());
}

TEST(SpecContextTest, BucketsAndFracBinsByHand) {
  ContextConfig cfg;  // s_min -3, step 0.25, 64 buckets, 4 frac bins
  // mu = 1.0 + 0.3 ulp (bf16 ulp at 1.0 is 2^-7); sigma = 2^-7 * 2 -> s = 1 octave.
  const float mu = 1.0f + 0.3f * 0.0078125f;
  const std::vector<float> m = {mu}, ls = {-6.0f};
  std::vector<uint16_t> ord(1), table(1);
  ASSERT_OK(ComputeContexts(cfg, m, ls, 1.0f, ord, table));
  // bucket floor((1 - (-3)) / 0.25) = 16; f = 0.3 -> bin floor(0.8 * 4) = 3.
  EXPECT_EQ(table[0], 16u * 4 + 3);
  EXPECT_EQ(ord[0], 0x8000u + 0x3F80u);
  EXPECT_FLOAT_EQ(ApproxLog2(8.0f), 3.0f);
  EXPECT_FLOAT_EQ(ApproxLog2(1.5f), 0.5f);
  EXPECT_STATUS(ComputeContexts(cfg, m, ls, 1.0f, ord, std::span<uint16_t>()), kInvalidArgument);
}

// fp8: a NaN prediction gives the fp8 NaN of its sign whatever its payload (the GPU
// decoder must agree, and CUDA division would turn -NaN into +NaN), and its sub-ulp
// offset counts as 0 (the middle frac bin).
TEST(SpecContexts, Fp8NanPredictionKeepsItsSign) {
  ContextConfig cfg;
  cfg.dtype = DType::kFP8E4M3;
  const std::vector<float> m = {-std::nanf(""), std::nanf(""), FromBits(0xFFA00001u)};
  const std::vector<float> ls = {-6.0f};
  std::vector<uint16_t> ord(3), table(3);
  ASSERT_OK(ComputeContexts(cfg, m, ls, 0.5f, ord, table));
  EXPECT_EQ(ord[0], Fp8Ordinal(0xFF));
  EXPECT_EQ(ord[1], Fp8Ordinal(0x7F));
  EXPECT_EQ(ord[2], Fp8Ordinal(0xFF));
  for (uint16_t t : table) EXPECT_EQ(t % cfg.frac_bins, cfg.frac_bins / 2);
}

}  // namespace
}  // namespace kvstash::spec
