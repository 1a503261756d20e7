// Small random models for the predictor tests, so they run without a model file:
// TinyModel builds a 3-layer Llama or Qwen3 (q/k norms) model with hidden 96 (not a
// multiple of the 128-wide quantisation group), 6 query heads over 2 KV heads, ffn 200
// and a 50-token vocabulary; RunInSplits feeds a prompt to a SpecPredictor in batches,
// and SameBits compares two predictor caches bit for bit. The weights depend only on
// the seed (std::mt19937, normal draws), so every test that uses a seed sees the same
// model.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "model/forward/linear.h"
#include "model/predictor/spec_predictor.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_util.h"

namespace kvstash::testing {

// n draws from N(0, spread^2).
inline std::vector<float> RandomNormal(size_t n, float spread, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// A dense fp32 projection [out, in] with N(0, 1/in) weights.
inline std::unique_ptr<model::Linear> RandomDense(uint32_t out, uint32_t in, std::mt19937& rng) {
  auto l = model::MakeDense(
      RandomNormal(static_cast<size_t>(out) * in, 1.0f / std::sqrt(static_cast<float>(in)), rng), out, in, "w");
  EXPECT_OK(l.status());
  return std::move(l).value();
}

// The model described at the top of this file; norms are 1 + N(0, 0.01), the final norm
// is all ones.
inline model::Model TinyModel(model::Architecture arch, uint32_t head_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  model::Model m;
  model::ModelConfig& c = m.config;
  c.arch = arch;
  c.n_layers = 3;
  c.hidden = 96;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = head_dim;
  c.ffn_hidden = 200;
  c.vocab_size = 50;
  m.embed = std::make_shared<const std::vector<float>>(
      RandomNormal(static_cast<size_t>(c.vocab_size) * c.hidden, 1.0f, rng));
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    model::LayerWeights w;
    auto norm = [&](uint32_t n) {
      std::vector<float> v = RandomNormal(n, 0.1f, rng);
      for (float& x : v) x += 1.0f;
      return v;
    };
    w.attn_norm = norm(c.hidden);
    w.ffn_norm = norm(c.hidden);
    if (c.qk_norm()) {
      w.q_norm = norm(c.head_dim);
      w.k_norm = norm(c.head_dim);
    }
    w.wq = RandomDense(c.q_dim(), c.hidden, rng);
    w.wk = RandomDense(c.kv_dim(), c.hidden, rng);
    w.wv = RandomDense(c.kv_dim(), c.hidden, rng);
    w.wo = RandomDense(c.hidden, c.q_dim(), rng);
    w.w_gate = RandomDense(c.ffn_hidden, c.hidden, rng);
    w.w_up = RandomDense(c.ffn_hidden, c.hidden, rng);
    w.w_down = RandomDense(c.hidden, c.ffn_hidden, rng);
    m.layers.push_back(std::move(w));
  }
  m.final_norm.assign(c.hidden, 1.0f);
  m.lm_head = RandomDense(c.vocab_size, c.hidden, rng);
  return m;
}

// TinyModel(kLlama, head_dim, seed) as a Qwen2: the same weights plus q/k/v biases
// N(0, 0.5) (drawn from seed + 1, so the Llama weights are unchanged).
inline model::Model TinyQwen2(uint32_t head_dim, uint32_t seed) {
  model::Model m = TinyModel(model::Architecture::kLlama, head_dim, seed);
  m.config.arch = model::Architecture::kQwen2;
  std::mt19937 rng(seed + 1);
  for (model::LayerWeights& w : m.layers) {
    w.bq = RandomNormal(m.config.q_dim(), 0.5f, rng);
    w.bk = RandomNormal(m.config.kv_dim(), 0.5f, rng);
    w.bv = RandomNormal(m.config.kv_dim(), 0.5f, rng);
  }
  return m;
}

// Runs `tokens` through a new SpecPredictor(m, o), one Run per batch: the batches end at
// each of `splits` (ascending, < tokens.size()) and at the end. Failures are recorded
// as test failures; the cache is empty when the predictor cannot be created.
inline model::PredictorCache RunInSplits(const model::Model& m, const model::SpecPredictorOptions& o,
                                         const std::vector<uint32_t>& tokens,
                                         std::vector<size_t> splits) {
  auto p = model::SpecPredictor::Create(m, o);
  EXPECT_OK(p.status());
  model::PredictorCache cache;
  if (!p.ok()) return cache;
  size_t at = 0;
  splits.push_back(tokens.size());
  for (size_t end : splits) {
    EXPECT_OK((*p)->Run(std::span(tokens).subspan(at, end - at), &cache));
    at = end;
  }
  return cache;
}

// True when both caches hold the same tokens and identical K and V bits in every layer.
inline bool SameBits(const model::PredictorCache& a, const model::PredictorCache& b) {
  if (a.tokens != b.tokens || a.k.size() != b.k.size() || a.v.size() != b.v.size()) return false;
  for (size_t l = 0; l < a.k.size(); ++l) {
    if (!SameBits(a.k[l], b.k[l]) || !SameBits(a.v[l], b.v[l])) return false;
  }
  return true;
}

}  // namespace kvstash::testing
