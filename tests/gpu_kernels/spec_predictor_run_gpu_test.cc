// SpecPredictorCuda::Run against SpecPredictor::Run on the CPU: the same K/V bits for
// random models of three architectures (Llama, Qwen3 with q/k norms, Qwen2 with q/k/v
// biases; grouped-query heads), several batch splits of the prompt (1 token, odd counts, one shot), and the
// real SmolLM2-135M when models/ has it. Skips visibly without a CUDA device
// (scripts/gpu_check.sh runs it on a GPU machine).
#include "model/predictor/spec_predictor_cuda.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "kvstash/dtype_bits.h"
#include "model/formats/model_loader.h"
#include "tests/gpu_kernels/gpu_test_util.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_model.h"

namespace kvstash::model {
namespace {

// A random model: 3 layers, hidden 96 (not a multiple of the 128 group), 6 query heads
// over 2 kv heads of 16 channels, ffn 200 (tests/support/tiny_model.h).
Model RandomModel(Architecture arch, uint32_t seed) { return testing::TinyModel(arch, 16, seed); }

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

TEST(SpecPredictorRunGpu, RandomQwen2WithBiasesMatchesTheCpuBitForBit) {
  KVSTASH_SKIP_WITHOUT_GPU();
  std::vector<uint32_t> tokens(29);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 11 + 5) % 50);
  const Model m = testing::TinyQwen2(16, 31);
  ExpectSameKv(m, SpecPredictorOptions{}, tokens, {});
  ExpectSameKv(m, SpecPredictorOptions{}, tokens, {1, 14});
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

TEST(SpecPredictorRunGpu, Int8AttentionIsNotSupported) {
  const Model m = RandomModel(Architecture::kLlama, 3);
  SpecPredictorOptions o;
  o.attention = SpecPredictorOptions::Attention::kInt8;
  ASSERT_OK_AND_ASSIGN(auto cpu, SpecPredictor::Create(m, o));
  EXPECT_STATUS(SpecPredictorCuda::Create(*cpu), kNotSupported);
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
