// The whole CPU predictor on small random models (no model file needed): the fast path
// (packed GEMM, AVX2 attention tiles, vectorised exp/SiLU) gives the portable
// reference path's bits (GemmBackend::kScalar) for shapes SmolLM2 does not have: a
// group wider than the hidden size, odd groups, head_dim not a multiple of 8, QK-norm
// (Qwen3), q/k/v biases (Qwen2), 1 and 2 threads, batch splits.
#include <gtest/gtest.h>

#include <vector>

#include "model/predictor/spec_predictor.h"
#include "tests/support/tiny_model.h"

namespace kvstash::model {
namespace {

using ::kvstash::testing::RunInSplits;
using ::kvstash::testing::SameBits;
using ::kvstash::testing::TinyModel;
using ::kvstash::testing::TinyQwen2;

TEST(PredictorTinyModelTest, FastPathGivesTheReferenceBits) {
  std::vector<uint32_t> tokens(37);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((7 + 13 * i) % 50);
  struct Variant {
    int group, bits;
  };
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen3, Architecture::kQwen2}) {
    for (uint32_t hd : {16u, 12u}) {
      const Model m = arch == Architecture::kQwen2 ? TinyQwen2(hd, 3 + hd) : TinyModel(arch, hd, 3 + hd);
      for (Variant v : {Variant{128, 16}, Variant{32, 16}, Variant{7, 16}, Variant{0, 8}, Variant{5, 8}}) {
        SpecPredictorOptions ref;
        ref.group = v.group;
        ref.activation_bits = v.bits;
        ref.backend = spec::GemmBackend::kScalar;
        const PredictorCache want = RunInSplits(m, ref, tokens, {});
        ASSERT_EQ(want.tokens, tokens.size());
        for (int threads : {1, 2}) {
          SpecPredictorOptions fast = ref;
          fast.backend = spec::GemmBackend::kAuto;
          fast.threads = threads;
          EXPECT_TRUE(SameBits(want, RunInSplits(m, fast, tokens, {})))
              << fast.VariantName() << " hd=" << hd << " threads=" << threads;
          EXPECT_TRUE(SameBits(want, RunInSplits(m, fast, tokens, {1, 9, 10, 30})))
              << fast.VariantName() << " hd=" << hd << " threads=" << threads << " with splits";
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvstash::model
