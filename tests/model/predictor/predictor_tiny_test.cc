// The whole CPU predictor on small random models (no model file needed): the fast path
// (packed GEMM, AVX2 attention tiles, vectorised exp/SiLU) gives the portable
// reference path's bits (GemmBackend::kScalar) for shapes SmolLM2 does not have: a
// group wider than the hidden size, odd groups, head_dim not a multiple of 8, QK-norm
// (Qwen3), q/k/v biases (Qwen2), 1 and 2 threads, batch splits. The int8-attention
// variants ("-attn8") the same way on every backend this CPU has (AMX included, with
// head_dim 64), and close to (but not equal to) the fp32-attention predictions.
#include <gtest/gtest.h>

#include <cmath>
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

// The backends this CPU runs (kScalar always).
std::vector<spec::GemmBackend> BackendsHere() {
  std::vector<spec::GemmBackend> out = {spec::GemmBackend::kScalar};
  if (spec::CpuHasAvx2()) out.push_back(spec::GemmBackend::kAvx2);
  if (spec::CpuHasAvx512()) out.push_back(spec::GemmBackend::kAvx512);
  if (spec::CpuHasAmx()) out.push_back(spec::GemmBackend::kAmx);
  return out;
}

TEST(PredictorTinyModelTest, IntAttentionGivesTheSameBitsOnEveryBackendAndSplit) {
  std::vector<uint32_t> tokens(150);  // more than one 128-key group
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((11 + 17 * i) % 50);
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen3, Architecture::kQwen2}) {
    for (uint32_t hd : {64u, 12u}) {  // 64: the AMX kernels' shape
      const Model m = arch == Architecture::kQwen2 ? TinyQwen2(hd, 5 + hd) : TinyModel(arch, hd, 5 + hd);
      SpecPredictorOptions ref;
      ref.attention = SpecPredictorOptions::Attention::kInt8;
      ref.backend = spec::GemmBackend::kScalar;
      ASSERT_EQ(ref.VariantName(), "w8a16-g128-attn8");
      const PredictorCache want = RunInSplits(m, ref, tokens, {});
      ASSERT_EQ(want.tokens, tokens.size());
      for (spec::GemmBackend backend : BackendsHere()) {
        for (int threads : {1, 2}) {
          SpecPredictorOptions o = ref;
          o.backend = backend;
          o.threads = threads;
          const auto name = ::testing::Message()
                            << "arch " << static_cast<int>(arch) << " hd " << hd << " backend "
                            << static_cast<int>(backend) << " threads " << threads;
          EXPECT_TRUE(SameBits(want, RunInSplits(m, o, tokens, {}))) << name;
          EXPECT_TRUE(SameBits(want, RunInSplits(m, o, tokens, {1, 2, 40, 128, 129})))
              << name << " with splits";
        }
      }
    }
  }
}

// Relative RMS difference of b from a over every layer's K and V.
double RelRms(const PredictorCache& a, const PredictorCache& b) {
  double num = 0, den = 0;
  for (size_t l = 0; l < a.k.size(); ++l) {
    for (const auto& [x, y] : {std::pair(&a.k[l], &b.k[l]), std::pair(&a.v[l], &b.v[l])}) {
      for (size_t i = 0; i < x->size(); ++i) {
        num += std::pow(double((*x)[i]) - (*y)[i], 2);
        den += std::pow(double((*x)[i]), 2);
      }
    }
  }
  return std::sqrt(num / den);
}

TEST(PredictorTinyModelTest, IntAttentionStaysCloseToFp32Attention) {
  std::vector<uint32_t> tokens(96);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((3 + 7 * i) % 50);
  const Model m = TinyModel(Architecture::kLlama, 64, 9);
  SpecPredictorOptions fp32;
  SpecPredictorOptions int8 = fp32;
  int8.attention = SpecPredictorOptions::Attention::kInt8;
  const PredictorCache a = RunInSplits(m, fp32, tokens, {}), b = RunInSplits(m, int8, tokens, {});
  // Layer 0's K/V come before any attention: identical. Later layers differ by the
  // int8 rounding of K and V (a step of 1/127 of a row's largest value), well under 2%.
  EXPECT_TRUE(::kvstash::testing::SameBits(a.k[0], b.k[0]));
  EXPECT_TRUE(::kvstash::testing::SameBits(a.v[0], b.v[0]));
  const double err = RelRms(a, b);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 0.02);
  ASSERT_OK_AND_ASSIGN(auto p8, SpecPredictor::Create(m, int8));
  ASSERT_OK_AND_ASSIGN(auto p32, SpecPredictor::Create(m, fp32));
  EXPECT_NE(p8->Digest(), p32->Digest());
}

TEST(PredictorTinyModelTest, IntAttentionIsRefusedWhereItDoesNotApply) {
  const Model m = TinyModel(Architecture::kLlama, 16, 2);
  SpecPredictorOptions o;
  o.attention = SpecPredictorOptions::Attention::kInt8;
  o.arithmetic = SpecPredictorOptions::Arithmetic::kGgml;
  EXPECT_STATUS(SpecPredictor::Create(m, o), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::model
