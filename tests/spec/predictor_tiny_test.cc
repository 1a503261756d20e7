// The whole CPU predictor on small random models (no model file needed): the fast path
// (packed GEMM, AVX2 attention tiles, vectorised exp/SiLU) gives the portable
// reference path's bits (GemmBackend::kScalar) for shapes SmolLM2 does not have: a
// group wider than the hidden size, odd groups, head_dim not a multiple of 8, QK-norm
// (Qwen3), 1 and 2 threads, batch splits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/forward/linear.h"
#include "model/predictor/spec_predictor.h"
#include "tests/support/test_util.h"

namespace kvstash::model {
namespace {

std::vector<float> Random(size_t n, float spread, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

std::unique_ptr<Linear> Dense(uint32_t out, uint32_t in, std::mt19937& rng) {
  auto l = MakeDense(Random(static_cast<size_t>(out) * in, 1.0f / std::sqrt(static_cast<float>(in)), rng),
                     out, in, "w");
  EXPECT_OK(l.status());
  return std::move(l).value();
}

Model TinyModel(Architecture arch, uint32_t head_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  Model m;
  ModelConfig& c = m.config;
  c.arch = arch;
  c.n_layers = 3;
  c.hidden = 96;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = head_dim;
  c.ffn_hidden = 200;
  c.vocab_size = 50;
  m.embed = std::make_shared<const std::vector<float>>(Random(static_cast<size_t>(c.vocab_size) * c.hidden, 1.0f, rng));
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    LayerWeights w;
    auto norm = [&](uint32_t n) {
      std::vector<float> v = Random(n, 0.1f, rng);
      for (float& x : v) x += 1.0f;
      return v;
    };
    w.attn_norm = norm(c.hidden);
    w.ffn_norm = norm(c.hidden);
    if (c.qk_norm()) {
      w.q_norm = norm(c.head_dim);
      w.k_norm = norm(c.head_dim);
    }
    w.wq = Dense(c.q_dim(), c.hidden, rng);
    w.wk = Dense(c.kv_dim(), c.hidden, rng);
    w.wv = Dense(c.kv_dim(), c.hidden, rng);
    w.wo = Dense(c.hidden, c.q_dim(), rng);
    w.w_gate = Dense(c.ffn_hidden, c.hidden, rng);
    w.w_up = Dense(c.ffn_hidden, c.hidden, rng);
    w.w_down = Dense(c.hidden, c.ffn_hidden, rng);
    m.layers.push_back(std::move(w));
  }
  m.final_norm.assign(c.hidden, 1.0f);
  m.lm_head = Dense(c.vocab_size, c.hidden, rng);
  return m;
}

PredictorCache RunSplits(const Model& m, const SpecPredictorOptions& o, const std::vector<uint32_t>& tokens,
                         std::vector<size_t> splits) {
  auto p = SpecPredictor::Create(m, o);
  EXPECT_OK(p.status());
  PredictorCache cache;
  if (!p.ok()) return cache;
  size_t at = 0;
  splits.push_back(tokens.size());
  for (size_t end : splits) {
    EXPECT_OK((*p)->Run(std::span(tokens).subspan(at, end - at), &cache));
    at = end;
  }
  return cache;
}

bool SameBits(const PredictorCache& a, const PredictorCache& b) {
  if (a.tokens != b.tokens || a.k.size() != b.k.size()) return false;
  for (size_t l = 0; l < a.k.size(); ++l) {
    if (a.k[l].size() != b.k[l].size() || std::memcmp(a.k[l].data(), b.k[l].data(), a.k[l].size() * 4) != 0 ||
        std::memcmp(a.v[l].data(), b.v[l].data(), a.v[l].size() * 4) != 0) {
      return false;
    }
  }
  return true;
}

TEST(PredictorTinyModelTest, FastPathGivesTheReferenceBits) {
  std::vector<uint32_t> tokens(37);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((7 + 13 * i) % 50);
  struct Variant {
    int group, bits;
  };
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen3}) {
    for (uint32_t hd : {16u, 12u}) {
      const Model m = TinyModel(arch, hd, 3 + hd);
      for (Variant v : {Variant{128, 16}, Variant{32, 16}, Variant{7, 16}, Variant{0, 8}, Variant{5, 8}}) {
        SpecPredictorOptions ref;
        ref.group = v.group;
        ref.activation_bits = v.bits;
        ref.backend = spec::GemmBackend::kScalar;
        const PredictorCache want = RunSplits(m, ref, tokens, {});
        ASSERT_EQ(want.tokens, tokens.size());
        for (int threads : {1, 2}) {
          SpecPredictorOptions fast = ref;
          fast.backend = spec::GemmBackend::kAuto;
          fast.threads = threads;
          EXPECT_TRUE(SameBits(want, RunSplits(m, fast, tokens, {})))
              << fast.VariantName() << " hd=" << hd << " threads=" << threads;
          EXPECT_TRUE(SameBits(want, RunSplits(m, fast, tokens, {1, 9, 10, 30})))
              << fast.VariantName() << " hd=" << hd << " threads=" << threads << " with splits";
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvstash::model
