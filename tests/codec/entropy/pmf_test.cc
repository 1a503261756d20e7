#include "codec/entropy/pmf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

TEST(Pmf, LaplaceCellsByHand) {
  ASSERT_OK_AND_ASSIGN(auto p, LaplacePmf(8, SymbolMapping::kTwosComplement, 0.0, 1.0));
  // [-1/2, 1/2]: 1 - e^-0.5; [1/2, 3/2]: (e^-0.5 - e^-1.5) / 2; symmetric.
  EXPECT_NEAR(p[0], 0.39346934028736658, 1e-15);
  EXPECT_NEAR(p[1], 0.19170024978210182, 1e-15);
  EXPECT_EQ(p[1], p[255]);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-12);
  ASSERT_OK_AND_ASSIGN(auto u, LaplacePmf(4, SymbolMapping::kUnsigned, 3.0, 1.0));
  EXPECT_NEAR(u[3], 0.39346934028736658, 1e-15);
  EXPECT_NEAR(u[4], 0.19170024978210182, 1e-15);
}

TEST(Pmf, GaussianCellsByHand) {
  ASSERT_OK_AND_ASSIGN(auto p, GaussianPmf(8, SymbolMapping::kTwosComplement, 0.0, 1.0));
  // erf(0.5 / sqrt 2) and (erf(1.5 / sqrt 2) - erf(0.5 / sqrt 2)) / 2.
  EXPECT_NEAR(p[0], 0.38292492254802624, 1e-12);
  EXPECT_NEAR(p[1], 0.24173033745712885, 1e-12);
  EXPECT_NEAR(p[3], p[253], 1e-15);
  // Far tail through erfc, no cancellation: cell [9.5, 10.5] ~ 1.0e-21.
  EXPECT_NEAR(p[10] / 1.0494083174730946e-21, 1.0, 1e-8);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-12);
}

TEST(Pmf, MixturesAndHistograms) {
  const GaussianComponent one[] = {{2.0, 1.5, 3.0}};
  ASSERT_OK_AND_ASSIGN(auto m, GaussianMixturePmf(6, SymbolMapping::kUnsigned, one));
  ASSERT_OK_AND_ASSIGN(auto g, GaussianPmf(6, SymbolMapping::kUnsigned, 1.5, 3.0));
  for (size_t v = 0; v < g.size(); ++v) EXPECT_EQ(m[v], 2.0 * g[v]);
  ASSERT_OK_AND_ASSIGN(auto mixed, MixPmfs(g, 0.25, m, 0.5));
  EXPECT_EQ(mixed[7], 0.25 * g[7] + 0.5 * m[7]);
  const uint64_t counts[] = {1, 0, 3, 4};
  ASSERT_OK_AND_ASSIGN(auto h, HistogramPmf(counts));
  EXPECT_EQ(h, (std::vector<double>{0.125, 0.0, 0.375, 0.5}));
}

TEST(Pmf, RejectsBadInput) {
  EXPECT_STATUS(LaplacePmf(0, SymbolMapping::kUnsigned, 0, 1), kInvalidArgument);
  EXPECT_STATUS(LaplacePmf(17, SymbolMapping::kUnsigned, 0, 1), kInvalidArgument);
  EXPECT_STATUS(LaplacePmf(8, SymbolMapping::kUnsigned, 0, 0), kInvalidArgument);
  EXPECT_STATUS(GaussianPmf(8, SymbolMapping::kUnsigned, std::nan(""), 1), kInvalidArgument);
  const GaussianComponent neg[] = {{-1.0, 0.0, 1.0}};
  EXPECT_STATUS(GaussianMixturePmf(8, SymbolMapping::kUnsigned, neg), kInvalidArgument);
  EXPECT_STATUS(GaussianMixturePmf(8, SymbolMapping::kUnsigned, {}), kInvalidArgument);
  const uint64_t three[] = {1, 2, 3};
  EXPECT_STATUS(HistogramPmf(three), kInvalidArgument);
  const uint64_t zeros[] = {0, 0};
  EXPECT_STATUS(HistogramPmf(zeros), kInvalidArgument);
  const double a[] = {1, 2}, b[] = {1};
  EXPECT_STATUS(MixPmfs(a, 1, b, 1), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::entropy
