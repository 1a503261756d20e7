// SpecPredictorCuda::Run against SpecPredictor::Run on the CPU: the same K/V bits for
// random models of both architectures (Llama, Qwen3 with q/k norms, grouped-query
// heads), several batch splits of the prompt (1 token, odd counts, one shot), and the
// real SmolLM2-135M when models/ has it. Skips visibly without a CUDA device
// (scripts/gpu_check.sh runs it on a GPU machine).
#include "model/predictor/spec_predictor_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "common/dtype_bits.h"
#include "model/formats/model_loader.h"
#include "tests/gpu_kernels/gpu_test_util.h"
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

// A random model: 3 layers, hidden 96 (not a multiple of the 128 group), 6 query heads
// over 2 kv heads of 16 channels, ffn 200.
Model RandomModel(Architecture arch, uint32_t seed) {
  std::mt19937 rng(seed);
  Model m;
  ModelConfig& c = m.config;
  c.arch = arch;
  c.n_layers = 3;
  c.hidden = 96;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 16;
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

// Runs tokens split at `splits` on the CPU and on the GPU; expects identical caches.
void ExpectSameKv(const Model& model, const SpecPredictorOptions& o,
                  const std::vector<uint32_t>& tokens, std::vector<size_t> splits) {
  ASSERT_OK_AND_ASSIGN(auto cpu, SpecPredictor::Create(model, o));
  ASSERT_OK_AND_ASSIGN(auto gpu, SpecPredictorCuda::Create(*cpu));
  PredictorCache a, b;
  size_t at = 0;
  splits.push_back(tokens.size());
  for (size_t end : splits) {
    const auto part = std::span(tokens).subspan(at, end - at);
    ASSERT_OK(cpu->Run(part, &a));
    ASSERT_OK(gpu->Run(part, &b));
    at = end;
  }
  ASSERT_EQ(b.tokens, a.tokens);
  ASSERT_EQ(b.k.size(), a.k.size());
  for (size_t l = 0; l < a.k.size(); ++l) {
    ASSERT_EQ(b.k[l].size(), a.k[l].size());
    for (size_t i = 0; i < a.k[l].size(); ++i) {
      ASSERT_EQ(Bits(b.k[l][i]), Bits(a.k[l][i])) << "K layer " << l << " index " << i;
      ASSERT_EQ(Bits(b.v[l][i]), Bits(a.v[l][i])) << "V layer " << l << " index " << i;
    }
  }
}

TEST(SpecPredictorRunGpu, RandomModelsMatchTheCpuBitForBit) {
  KVSTASH_SKIP_WITHOUT_GPU();
  std::vector<uint32_t> tokens(37);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7 + 3) % 50);
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen3}) {
    const Model m = RandomModel(arch, 21 + static_cast<uint32_t>(arch));
    for (int group : {128, 32}) {
      SpecPredictorOptions o;
      o.group = group;
      SCOPED_TRACE(::testing::Message() << "arch " << static_cast<int>(arch) << " group " << group);
      ExpectSameKv(m, o, tokens, {});
      ExpectSameKv(m, o, tokens, {1, 2, 19});
    }
  }
}

TEST(SpecPredictorRunGpu, SmolLm2MatchesTheCpuBitForBit) {
  KVSTASH_SKIP_WITHOUT_GPU();
  const std::string path = ::kvstash::testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "SKIPPED: " << path << " absent";
  ASSERT_OK_AND_ASSIGN(auto model, LoadModel(path));
  std::vector<uint32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(100 + 37 * i);
  ExpectSameKv(*model, SpecPredictorOptions{}, tokens, {17});
}

TEST(SpecPredictorRunGpu, W8A8IsNotSupported) {
  const Model m = RandomModel(Architecture::kLlama, 3);
  SpecPredictorOptions o;
  o.activation_bits = 8;
  ASSERT_OK_AND_ASSIGN(auto cpu, SpecPredictor::Create(m, o));
  EXPECT_STATUS(SpecPredictorCuda::Create(*cpu), kNotSupported);
}

}  // namespace
}  // namespace kvstash::model
