#include "codec/entropy/table_builder.h"

#include <gtest/gtest.h>

#include <cmath>

#include "codec/entropy/pmf.h"
#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

TEST(BuildTable, HandDerivedCyclicRange) {
  // Kept {0, 1, 7}; the longest run of dropped symbols is 2..6, so the range is
  // {7, 0, 1}. Weights (0.2, 0.5, 0.3, escape 0) at P = 10: targets (204.8, 512,
  // 307.2, 0) -> floors (204, 512, 307, 1) already sum to 1024.
  const std::vector<double> pmf = {0.5, 0.3, 0, 0, 0, 0, 0, 0.2};
  ASSERT_OK_AND_ASSIGN(auto t, BuildTable(pmf, {.precision = 10}));
  EXPECT_EQ(t.first_symbol(), 7u);
  EXPECT_EQ(t.freqs(), (std::vector<uint32_t>{204, 512, 307}));
  EXPECT_EQ(t.escape_freq(), 1u);
}

TEST(BuildTable, FullAlphabetHasNoEscape) {
  const std::vector<double> pmf = {1, 1, 1, 1};
  ASSERT_OK_AND_ASSIGN(auto t, BuildTable(pmf, {.precision = 12}));
  EXPECT_EQ(t.first_symbol(), 0u);
  EXPECT_EQ(t.escape_freq(), 0u);
  EXPECT_EQ(t.freqs(), (std::vector<uint32_t>{1024, 1024, 1024, 1024}));
}

TEST(BuildTable, EscapeThresholdTrimsTails) {
  ASSERT_OK_AND_ASSIGN(auto pmf, GaussianPmf(8, SymbolMapping::kTwosComplement, 0.0, 0.5));
  ASSERT_OK_AND_ASSIGN(auto t, BuildTable(pmf, {.precision = 12}));
  // Default tau = 3 / (2 * 4096 * 20) = 1.83e-5; cells up to |x| = 2 (P ~ 3e-5 at 2)
  // are kept, |x| = 3 (~1e-9) is not.
  EXPECT_EQ(t.first_symbol(), 254u);
  EXPECT_EQ(t.num_direct(), 5u);
  EXPECT_GE(t.escape_freq(), 1u);
  // A user threshold above P(|x| = 1) keeps only 0.
  ASSERT_OK_AND_ASSIGN(auto narrow, BuildTable(pmf, {.precision = 12, .escape_threshold = 0.2}));
  EXPECT_EQ(narrow.first_symbol(), 0u);
  EXPECT_EQ(narrow.num_direct(), 1u);
}

TEST(BuildTable, WideSixteenBitPmfFitsThePrecision) {
  // sigma = 3000 over 65536 values: the kept range is wider than 2^10 slots, so tau
  // doubles until range + escape fit.
  ASSERT_OK_AND_ASSIGN(auto pmf, GaussianPmf(16, SymbolMapping::kTwosComplement, 0.0, 3000.0));
  ASSERT_OK_AND_ASSIGN(auto t, BuildTable(pmf, {.precision = 10}));
  EXPECT_LE(t.num_direct() + 1, 1024u);
  EXPECT_GE(t.escape_freq(), 1u);
}

TEST(BuildTable, QuantisationLossIsSmallForAWideLaplace) {
  // KL(q || table) for Laplace b = 8, P = 12 is a fraction of a percent of H(q).
  ASSERT_OK_AND_ASSIGN(auto pmf, LaplacePmf(8, SymbolMapping::kTwosComplement, 0.0, 8.0));
  ASSERT_OK_AND_ASSIGN(auto t, BuildTable(pmf, {.precision = 12}));
  double h = 0.0, cross = 0.0;
  for (uint32_t v = 0; v < 256; ++v) {
    if (pmf[v] <= 0.0) continue;
    h -= pmf[v] * std::log2(pmf[v]);
    cross -= pmf[v] * std::log2(t.Probability(v));
  }
  EXPECT_LT((cross - h) / h, 0.003) << "H " << h << " cross " << cross;
}

TEST(BuildTable, RejectsBadInput) {
  EXPECT_STATUS(BuildTable(std::vector<double>{1, 1, 1}, {}), kInvalidArgument);
  EXPECT_STATUS(BuildTable(std::vector<double>{1}, {}), kInvalidArgument);
  EXPECT_STATUS(BuildTable(std::vector<double>{0, 0}, {}), kInvalidArgument);
  EXPECT_STATUS(BuildTable(std::vector<double>{1, -1}, {}), kInvalidArgument);
  EXPECT_STATUS(BuildTable(std::vector<double>{1, 1}, {.precision = 16}), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::entropy
