// Output-sensitivity weighting of the dckv allocation (dckv_calibration.h, "Output
// weights"): weighted PCA (DckvFitOptions::output_weight, encoder scale in the
// artifact) and weighted per-component steps (DckvRateOptions::output_weight).
#include <gtest/gtest.h>

#include <cmath>

#include "codec/baselines/kvtc.h"
#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

constexpr Digest256 kModel = {4, 5, 6};
constexpr uint32_t kBlocks = 2 * testing::kLayers * testing::kHeads;

// Block 0 (layer 0 K head 0) weighs 100, the others 1.
std::vector<double> HeavyFirstBlock() {
  std::vector<double> w(kBlocks, 1.0);
  w[0] = 100.0;
  return w;
}

// Mean squared error per (layer, K/V, head) block between two chunks' values.
std::vector<double> BlockMse(const std::vector<float>& a, const std::vector<float>& b, uint32_t tokens) {
  // ChunkValues order: layer, K then V, [tokens, heads, head_dim].
  const uint32_t hr = testing::kHeads * testing::kHeadDim;
  std::vector<double> out(kBlocks, 0.0);
  for (uint32_t l = 0; l < testing::kLayers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      const size_t base = (2ull * l + kv) * tokens * hr;
      for (uint32_t t = 0; t < tokens; ++t) {
        for (uint32_t c = 0; c < hr; ++c) {
          const size_t i = base + static_cast<size_t>(t) * hr + c;
          const double d = static_cast<double>(a[i]) - b[i];
          out[(l * 2 + kv) * testing::kHeads + c / testing::kHeadDim] += d * d / (tokens * testing::kHeadDim);
        }
      }
    }
  }
  return out;
}

Result<std::vector<double>> DecodedBlockMse(const DckvArtifact& artifact) {
  KVSTASH_ASSIGN_OR_RETURN(auto codec, DckvCodec::Create(artifact));
  const auto eval = testing::MakeRows(120, 3);
  const auto chunk = testing::MakeChunk(eval, 0, 120, DType::kF32);
  KVSTASH_ASSIGN_OR_RETURN(auto payload, codec.Encode(chunk.view(), 0, 120, kModel));
  KVSTASH_ASSIGN_OR_RETURN(auto decoded, codec.Decode(payload, kModel));
  return BlockMse(testing::ChunkValues(chunk), testing::ChunkValues(decoded), 120);
}

DckvRateOptions Rate(double ratio) {
  DckvRateOptions o;
  o.target_ratio = ratio;
  o.raw_head = 0;
  o.raw_tail = 0;
  return o;
}

// Weighted PCA: the decoder basis is u / sqrt(w) and the encoder scale w, so that
// encode-then-decode of every component reproduces the row (checked at a high rate),
// and at a low rate the heavy block's error drops against the plain codec's.
TEST(DckvWeighting, WeightedPcaReconstructsAndFavoursHeavyBlocks) {
  const auto rows = testing::MakeRows(800, 0);
  ASSERT_OK_AND_ASSIGN(auto plain, FitDckvBasis(rows, 2));
  DckvFitOptions fo;
  fo.output_weight = HeavyFirstBlock();
  ASSERT_OK_AND_ASSIGN(auto weighted, FitDckvBasis(rows, 2, fo));
  ASSERT_EQ(weighted.groups[0].dim_scale.size(), weighted.groups[0].dims);
  // Weights normalised to mean 1: block 0 has 100 / (111 / 12).
  EXPECT_NEAR(weighted.groups[0].dim_scale[0], std::sqrt(100.0 * kBlocks / (100.0 + kBlocks - 1)), 1e-5);
  EXPECT_NEAR(weighted.groups[0].dim_scale[testing::kHeadDim],
              std::sqrt(1.0 * kBlocks / (100.0 + kBlocks - 1)), 1e-5);
  EXPECT_TRUE(plain.groups[0].dim_scale.empty());

  ASSERT_OK_AND_ASSIGN(auto high, MakeDckvArtifact(weighted, Rate(3.0)));
  ASSERT_EQ(high.groups[0].encode_scale.size(), high.groups[0].dims);
  ASSERT_OK_AND_ASSIGN(auto high_mse, DecodedBlockMse(high));
  for (double m : high_mse) EXPECT_LT(m, 0.05);  // values O(10): structure captured

  ASSERT_OK_AND_ASSIGN(auto low_w, MakeDckvArtifact(weighted, Rate(24.0)));
  ASSERT_OK_AND_ASSIGN(auto low_p, MakeDckvArtifact(plain, Rate(24.0)));
  ASSERT_OK_AND_ASSIGN(auto mse_w, DecodedBlockMse(low_w));
  ASSERT_OK_AND_ASSIGN(auto mse_p, DecodedBlockMse(low_p));
  EXPECT_LT(mse_w[0], 0.5 * mse_p[0]);
  // The weighted distortion (what the allocation minimises) is lower too.
  double dw = 0, dp = 0;
  const auto w = HeavyFirstBlock();
  for (uint32_t b = 0; b < kBlocks; ++b) {
    dw += w[b] * mse_w[b];
    dp += w[b] * mse_p[b];
  }
  EXPECT_LT(dw, dp);

  // The artifact keeps the encoder scale through Serialize / Parse.
  ASSERT_OK_AND_ASSIGN(auto parsed, DckvArtifact::Parse(low_w.Serialize()));
  EXPECT_EQ(parsed.groups[0].encode_scale, low_w.groups[0].encode_scale);
  EXPECT_EQ(parsed.Digest(), low_w.Digest());
}

// Weighted steps on a plain PCA: step_i = Delta / sqrt(s_i) with s_i = sum_d w_d u_i[d]^2
// (weights normalised to mean 1), checked against the basis directly.
TEST(DckvWeighting, WeightedStepsFollowComponentWeights) {
  const auto rows = testing::MakeRows(800, 0);
  ASSERT_OK_AND_ASSIGN(auto basis, FitDckvBasis(rows, 2));
  DckvRateOptions o = Rate(6.0);
  o.output_weight = HeavyFirstBlock();
  for (double& x : o.output_weight) x *= 7.0;  // any scale
  ASSERT_OK_AND_ASSIGN(auto a, MakeDckvArtifact(basis, o));
  const double mean_w = (100.0 + kBlocks - 1) / kBlocks;
  const auto& g = a.groups[0];
  ASSERT_GE(g.n_active(), 2u);
  auto weight_of = [&](uint32_t i) {
    double s = 0;
    for (uint32_t c = 0; c < g.dims; ++c) {
      const uint32_t block = ((c / (2 * testing::kHeads * testing::kHeadDim)) * 2 +
                              (c / (testing::kHeads * testing::kHeadDim)) % 2) *
                                 testing::kHeads +
                             (c % (testing::kHeads * testing::kHeadDim)) / testing::kHeadDim;
      const double u = g.basis[static_cast<size_t>(i) * g.dims + c];
      s += (block == 0 ? 100.0 : 1.0) / mean_w * u * u;
    }
    return s;
  };
  const double delta = g.step[0] * std::sqrt(weight_of(0));
  for (uint32_t i = 1; i < g.n_active(); ++i) {
    EXPECT_NEAR(g.step[i] * std::sqrt(weight_of(i)), delta, 1e-4 * delta) << i;
  }
  // Without weights every step is the same.
  ASSERT_OK_AND_ASSIGN(auto flat, MakeDckvArtifact(basis, Rate(6.0)));
  for (float s : flat.groups[0].step) EXPECT_EQ(s, flat.groups[0].step[0]);
}

TEST(DckvWeighting, BadWeightsAreInvalidArgument) {
  const auto rows = testing::MakeRows(200, 0);
  DckvFitOptions fo;
  fo.output_weight = std::vector<double>(kBlocks - 1, 1.0);
  EXPECT_STATUS(FitDckvBasis(rows, 2, fo), kInvalidArgument);
  fo.output_weight = std::vector<double>(kBlocks, 1.0);
  fo.output_weight[3] = 0.0;
  EXPECT_STATUS(FitDckvBasis(rows, 2, fo), kInvalidArgument);
  fo.output_weight[3] = std::nan("");
  EXPECT_STATUS(FitDckvBasis(rows, 2, fo), kInvalidArgument);
  fo.output_weight = HeavyFirstBlock();
  ASSERT_OK_AND_ASSIGN(auto weighted, FitDckvBasis(rows, 2, fo));
  DckvRateOptions o = Rate(6.0);
  o.output_weight = HeavyFirstBlock();
  EXPECT_STATUS(MakeDckvArtifact(weighted, o), kInvalidArgument);  // weighted twice
  EXPECT_STATUS(baselines::KvtcCodec::Create(weighted, 6.0, 10000.0f, 0, 0), kInvalidArgument);
}

// Per-dimension weights (index ((layer * 2 + kv) * heads + head) * head_dim + d): the
// block weights expanded to their dimensions give the same weighted basis; one heavy
// dimension gets sqrt(its weight / the mean) as its encoder scale, everywhere in its group.
TEST(DckvWeighting, PerDimensionWeights) {
  const auto rows = testing::MakeRows(400, 0);
  constexpr uint32_t kDims = kBlocks * testing::kHeadDim;
  DckvFitOptions by_block, by_dim;
  by_block.output_weight = HeavyFirstBlock();
  for (double w : by_block.output_weight)
    by_dim.output_weight.insert(by_dim.output_weight.end(), testing::kHeadDim, w);
  ASSERT_OK_AND_ASSIGN(auto a, FitDckvBasis(rows, 2, by_block));
  ASSERT_OK_AND_ASSIGN(auto b, FitDckvBasis(rows, 2, by_dim));
  ASSERT_EQ(a.groups.size(), b.groups.size());
  for (size_t g = 0; g < a.groups.size(); ++g) {
    EXPECT_EQ(a.groups[g].dim_scale, b.groups[g].dim_scale) << g;
    EXPECT_EQ(a.groups[g].basis, b.groups[g].basis) << g;
  }
  // Dimension 5 of layer 1's V head 1 weighs 1,000, the others 1.
  const uint32_t layer = 1, kv = 1, head = 1, d = 5;
  DckvFitOptions one;
  one.output_weight.assign(kDims, 1.0);
  one.output_weight[((layer * 2 + kv) * testing::kHeads + head) * testing::kHeadDim + d] = 1000.0;
  ASSERT_OK_AND_ASSIGN(auto c, FitDckvBasis(rows, 2, one));
  const double mean = (kDims - 1 + 1000.0) / kDims;
  const auto& g0 = c.groups[0];  // layers 0 and 1: layer 1's V starts at column 3 * heads * head_dim
  const uint32_t col = (2 * 1 + 1) * testing::kHeads * testing::kHeadDim + head * testing::kHeadDim + d;
  for (uint32_t i = 0; i < g0.dims; ++i) {
    EXPECT_NEAR(g0.dim_scale[i], std::sqrt((i == col ? 1000.0 : 1.0) / mean), 1e-5) << i;
  }
  // The same weights at step 2 of an unweighted basis shrink that dimension's error.
  ASSERT_OK_AND_ASSIGN(auto plain, FitDckvBasis(rows, 2));
  DckvRateOptions o = Rate(6.0);
  o.output_weight = one.output_weight;
  ASSERT_OK(MakeDckvArtifact(plain, o).status());
  o.output_weight.pop_back();  // neither one per block nor one per dimension
  EXPECT_STATUS(MakeDckvArtifact(plain, o), kInvalidArgument);
}

// A parsed encoder scale must be finite and > 0.
TEST(DckvWeighting, BadEncodeScaleIsCorruption) {
  const auto rows = testing::MakeRows(300, 0);
  DckvFitOptions fo;
  fo.output_weight = HeavyFirstBlock();
  ASSERT_OK_AND_ASSIGN(auto weighted, FitDckvBasis(rows, 2, fo));
  ASSERT_OK_AND_ASSIGN(auto a, MakeDckvArtifact(weighted, Rate(6.0)));
  a.groups[0].encode_scale[5] = -1.0f;
  EXPECT_STATUS(DckvArtifact::Parse(a.Serialize()), kCorruption);
  a.groups[0].encode_scale[5] = 0.0f;
  EXPECT_STATUS(DckvArtifact::Parse(a.Serialize()), kCorruption);
  a.groups[0].encode_scale.pop_back();
  EXPECT_STATUS(DckvCodec::Create(a), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::dckv
