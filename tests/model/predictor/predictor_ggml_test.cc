// The ggml-q4_1 predictor variant (SpecPredictorOptions::Arithmetic::kGgml) on a small
// random Q4_1 model (no model file needed): its bits do not depend on the thread count
// or the batch split, it computes what the dequantised weights compute (up to Q8_1
// rounding of the activations), its K comes out in the rotate_half order, and it
// refuses models without GGUF tensors; its SIMD backends give the scalar bits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kvstash/dtype_bits.h"
#include "model/formats/ggml_types.h"
#include "model/predictor/spec_predictor.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_model.h"

namespace kvstash::model {
namespace {

// Random Q4_1 blocks for a [rows, cols] projection: d in [0.5, 1.5] / (8 sqrt(cols)),
// m = -7.5 d (so weights are centred), nibbles uniform.
GgmlTensor RandomQ4_1(uint32_t rows, uint32_t cols, std::mt19937& rng) {
  GgmlTensor t;
  t.type = static_cast<uint32_t>(GgmlType::kQ4_1);
  t.rows = rows;
  t.cols = cols;
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint32_t b = 0; b < rows * cols / 32; ++b) {
    const float d = u(rng) / (8.0f * std::sqrt(static_cast<float>(cols)));
    const uint16_t dh = F32ToF16(d), mh = F32ToF16(-7.5f * F16ToF32(dh));
    t.bytes.insert(t.bytes.end(), {static_cast<uint8_t>(dh), static_cast<uint8_t>(dh >> 8),
                                   static_cast<uint8_t>(mh), static_cast<uint8_t>(mh >> 8)});
    for (int j = 0; j < 16; ++j) t.bytes.push_back(static_cast<uint8_t>(byte(rng)));
  }
  return t;
}

std::vector<float> Dequantized(const GgmlTensor& t) {
  std::vector<float> w(static_cast<size_t>(t.rows) * t.cols);
  EXPECT_OK(Dequantize(GgmlType::kQ4_1, t.bytes, w));
  return w;
}

// A llama-shaped model whose projections are Q4_1 blocks (Model::ggml_layers, q/k rows
// interleaved as in a GGUF file) and, as the GGUF loader builds them, their dequantised
// fp32 copies with q/k rows in rotate_half order.
Model TinyQ4_1Model(uint32_t seed) {
  std::mt19937 rng(seed);
  Model m;
  ModelConfig& c = m.config;
  c.arch = Architecture::kLlama;
  c.n_layers = 3;
  c.hidden = 96;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_hidden = 192;
  c.vocab_size = 50;
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> embed(static_cast<size_t>(c.vocab_size) * c.hidden);
  for (float& x : embed) x = g(rng);
  m.embed = std::make_shared<const std::vector<float>>(std::move(embed));
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    LayerWeights w;
    w.attn_norm.assign(c.hidden, 1.0f);
    w.ffn_norm.assign(c.hidden, 1.0f);
    GgmlLayerTensors t{RandomQ4_1(c.q_dim(), c.hidden, rng),    RandomQ4_1(c.kv_dim(), c.hidden, rng),
                       RandomQ4_1(c.kv_dim(), c.hidden, rng),   RandomQ4_1(c.hidden, c.q_dim(), rng),
                       RandomQ4_1(c.ffn_hidden, c.hidden, rng), RandomQ4_1(c.ffn_hidden, c.hidden, rng),
                       RandomQ4_1(c.hidden, c.ffn_hidden, rng)};
    auto dense = [](std::vector<float> v, const GgmlTensor& s) {
      auto d = MakeDense(std::move(v), s.rows, s.cols, "w");
      EXPECT_OK(d.status());
      return std::move(d).value();
    };
    w.wq = dense(InterleavedToHalfSplit(Dequantized(t.wq), c.n_heads, c.head_dim, c.hidden), t.wq);
    w.wk = dense(InterleavedToHalfSplit(Dequantized(t.wk), c.n_kv_heads, c.head_dim, c.hidden), t.wk);
    w.wv = dense(Dequantized(t.wv), t.wv);
    w.wo = dense(Dequantized(t.wo), t.wo);
    w.w_gate = dense(Dequantized(t.w_gate), t.w_gate);
    w.w_up = dense(Dequantized(t.w_up), t.w_up);
    w.w_down = dense(Dequantized(t.w_down), t.w_down);
    m.layers.push_back(std::move(w));
    m.ggml_layers.push_back(std::move(t));
  }
  m.final_norm.assign(c.hidden, 1.0f);
  auto head = MakeDense(std::vector<float>(static_cast<size_t>(c.vocab_size) * c.hidden, 0.01f), c.vocab_size,
                        c.hidden, "lm_head");
  EXPECT_OK(head.status());
  m.lm_head = std::move(head).value();
  return m;
}

SpecPredictorOptions Ggml(DType kv_dtype, int threads) {
  SpecPredictorOptions o;
  o.arithmetic = SpecPredictorOptions::Arithmetic::kGgml;
  o.kv_dtype = kv_dtype;
  o.threads = threads;
  return o;
}

using ::kvstash::testing::RunInSplits;
using ::kvstash::testing::SameBits;

std::vector<uint32_t> Tokens(size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 7 + 3) % 50);
  return t;
}

TEST(PredictorGgmlTest, BitsIndependentOfThreadsAndSplits) {
  const Model m = TinyQ4_1Model(1);
  const std::vector<uint32_t> tokens = Tokens(37);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    const PredictorCache one = RunInSplits(m, Ggml(dt, 1), tokens, {});
    ASSERT_EQ(one.tokens, tokens.size());
    EXPECT_TRUE(SameBits(one, RunInSplits(m, Ggml(dt, 3), tokens, {}))) << "3 threads";
    EXPECT_TRUE(SameBits(one, RunInSplits(m, Ggml(dt, 2), tokens, {1, 16, 17}))) << "splits 1/16/17";
  }
  // The cache dtype changes what later layers attend over, so the bits differ.
  EXPECT_FALSE(SameBits(RunInSplits(m, Ggml(DType::kF16, 1), tokens, {}),
                        RunInSplits(m, Ggml(DType::kBF16, 1), tokens, {})));
}

// Token 0 sits at position 0, where RoPE is the identity: layer 0's K and V of it are
// the dequantised weights (K rows in rotate_half order) times the RMS-normed embedding,
// up to the Q8_1 rounding of the activations (steps of amax / 127 per block of 32).
// A SIMD backend (numerics/ggml_gemm.h; the AVX2 attention rows) gives the
// scalar path's bits, both cache dtypes, threads and splits included. A backend the CPU
// (or KVSTASH_CPU_PATH) lacks is refused by Create and printed as SKIPPED.
void ExpectScalarBits(spec::GemmBackend backend) {
  const Model m = TinyQ4_1Model(4);
  const std::vector<uint32_t> tokens = Tokens(41);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    SpecPredictorOptions o = Ggml(dt, 2);
    o.backend = backend;
    auto p = SpecPredictor::Create(m, o);
    if (!p.ok()) {
      ASSERT_EQ(p.status().code(), Status::Code::kNotSupported) << p.status().ToString();
      GTEST_SKIP() << "SKIPPED: " << p.status().ToString();
    }
    SpecPredictorOptions ref = Ggml(dt, 1);
    ref.backend = spec::GemmBackend::kScalar;
    EXPECT_TRUE(SameBits(RunInSplits(m, ref, tokens, {}), RunInSplits(m, o, tokens, {1, 20})))
        << DTypeName(dt);
  }
}

TEST(PredictorGgmlTest, Avx2BackendGivesTheScalarBits) { ExpectScalarBits(spec::GemmBackend::kAvx2); }

TEST(PredictorGgmlTest, Avx512BackendGivesTheScalarBits) { ExpectScalarBits(spec::GemmBackend::kAvx512); }

TEST(PredictorGgmlTest, FirstTokenMatchesTheDequantisedWeights) {
  const Model m = TinyQ4_1Model(2);
  const PredictorCache c = RunInSplits(m, Ggml(DType::kF16, 1), {5}, {});
  const uint32_t D = m.config.hidden, kvd = m.config.kv_dim();
  std::vector<float> h(m.embed->begin() + 5 * D, m.embed->begin() + 6 * D);
  double ss = 0;
  for (float x : h) ss += static_cast<double>(x) * x;
  const double inv = 1.0 / std::sqrt(ss / D + m.config.rms_eps);
  for (float& x : h) x = static_cast<float>(x * inv);
  for (const auto& [lin, got] :
       {std::pair{m.layers[0].wk.get(), &c.k[0]}, std::pair{m.layers[0].wv.get(), &c.v[0]}}) {
    const auto* dense = dynamic_cast<const DenseLinear*>(lin);
    ASSERT_NE(dense, nullptr);
    double err2 = 0, ref2 = 0;
    for (uint32_t o = 0; o < kvd; ++o) {
      double want = 0;
      for (uint32_t i = 0; i < D; ++i) want += static_cast<double>(dense->weights()[o * D + i]) * h[i];
      err2 += (want - (*got)[o]) * (want - (*got)[o]);
      ref2 += want * want;
    }
    EXPECT_LT(std::sqrt(err2 / ref2), 0.02);  // Q8_1 rounding: about 1%, a wrong order is ~100%
    EXPECT_GT(ref2, 0.0);
  }
}

// GgmlArithmeticSupport (what kvstash-demo's --predictor-arithmetic auto asks) answers
// what Create with kGgml would: OK for an all-Q4_1 GGUF model, the same error otherwise.
TEST(PredictorGgmlTest, RefusesModelsWithoutGgufTensors) {
  EXPECT_OK(GgmlArithmeticSupport(TinyQ4_1Model(3)));
  Model m = TinyQ4_1Model(3);
  m.ggml_layers.clear();
  auto p = SpecPredictor::Create(m, Ggml(DType::kF16, 1));
  EXPECT_TRUE(p.status().IsInvalidArgument()) << p.status().ToString();
  EXPECT_TRUE(GgmlArithmeticSupport(m).IsInvalidArgument());
  Model q = TinyQ4_1Model(3);
  q.ggml_layers[1].w_up.type = static_cast<uint32_t>(GgmlType::kQ8_0);
  EXPECT_EQ(SpecPredictor::Create(q, Ggml(DType::kF16, 1)).status().code(), Status::Code::kNotSupported);
  const Status s = GgmlArithmeticSupport(q);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported);
  EXPECT_NE(s.message().find("layer 1 has a projection of ggml type 8 (Q4_1 only)"), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(SpecPredictor::Create(TinyQ4_1Model(3), Ggml(DType::kF32, 1)).status().IsInvalidArgument());
}

TEST(PredictorGgmlTest, VariantNames) {
  EXPECT_EQ(Ggml(DType::kF16, 1).VariantName(), "ggml-q4_1-f16");
  EXPECT_EQ(Ggml(DType::kBF16, 1).VariantName(), "ggml-q4_1-bf16");
  EXPECT_EQ(SpecPredictorOptions().VariantName(), "w8a16-g128");
}

}  // namespace
}  // namespace kvstash::model
