#include "codec/dckv/dckv_artifact.h"

#include <gtest/gtest.h>

#include <cmath>

#include "codec/dckv/dckv_calibration.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

// Independent reference: sum over cells of the integrated Laplace density.
double ReferenceEntropy(double b) {
  double h = 0;
  for (int k = -20000; k <= 20000; ++k) {
    auto cdf = [b](double x) { return x < 0 ? 0.5 * std::exp(x / b) : 1.0 - 0.5 * std::exp(-x / b); };
    const double p = cdf(k + 0.5) - cdf(k - 0.5);
    if (p > 0) h -= p * std::log2(p);
  }
  return h;
}

TEST(DckvCalibration, QuantizedLaplaceEntropyMatchesReference) {
  EXPECT_EQ(QuantizedLaplaceEntropy(0.0), 0.0);
  EXPECT_EQ(QuantizedLaplaceEntropy(-1.0), 0.0);
  for (double b : {0.05, 0.3, 1.0, 4.0, 37.0, 900.0}) {
    EXPECT_NEAR(QuantizedLaplaceEntropy(b), ReferenceEntropy(b), 1e-6) << b;
  }
  // High-rate limit: log2(2 e b).
  EXPECT_NEAR(QuantizedLaplaceEntropy(900.0), std::log2(2 * std::exp(1.0) * 900.0), 1e-3);
}

DckvArtifact MakeArtifact(double ratio) {
  auto rows = testing::MakeRows(600, 0);
  auto basis = FitDckvBasis(rows, 2);
  EXPECT_TRUE(basis.ok());
  DckvRateOptions o;
  o.target_ratio = ratio;
  o.raw_head = 2;
  o.raw_tail = 3;
  auto a = MakeDckvArtifact(*basis, o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(*a);
}

TEST(DckvCalibration, BasisIsOrthonormalAndSorted) {
  auto rows = testing::MakeRows(500, 0);
  ASSERT_OK_AND_ASSIGN(auto basis, FitDckvBasis(rows, 2));
  ASSERT_EQ(basis.groups.size(), 2u);  // layers {0,1} and {2}
  EXPECT_EQ(basis.groups[0].dims, 2u * 2 * testing::kHeads * testing::kHeadDim);
  EXPECT_EQ(basis.groups[1].dims, 2u * 1 * testing::kHeads * testing::kHeadDim);
  for (const auto& g : basis.groups) {
    for (uint32_t i = 0; i + 1 < g.dims; ++i) EXPECT_GE(g.variance[i], g.variance[i + 1]);
    for (uint32_t i = 0; i < 4; ++i) {
      for (uint32_t j = 0; j < 4; ++j) {
        double dot = 0;
        for (uint32_t c = 0; c < g.dims; ++c)
          dot += double(g.basis[i * g.dims + c]) * g.basis[j * g.dims + c];
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-4);
      }
    }
  }
  EXPECT_STATUS(FitDckvBasis(rows, 0), kInvalidArgument);
  DckvRows empty = rows;
  empty.rows = 0;
  EXPECT_STATUS(FitDckvBasis(empty, 2), kInvalidArgument);
}

TEST(DckvCalibration, HigherRatioKeepsFewerComponents) {
  const auto lo = MakeArtifact(3.0), hi = MakeArtifact(30.0);
  EXPECT_GT(lo.ActiveComponents(), hi.ActiveComponents());
  EXPECT_LT(lo.groups[0].step[0], hi.groups[0].step[0]);
}

TEST(DckvArtifact, SerializeParseRoundTrip) {
  const auto a = MakeArtifact(8.0);
  const auto bytes = a.Serialize();
  ASSERT_OK_AND_ASSIGN(auto b, DckvArtifact::Parse(bytes));
  EXPECT_EQ(b.Serialize(), bytes);
  EXPECT_EQ(b.Digest(), a.Digest());
  EXPECT_EQ(b.groups.size(), a.groups.size());
  EXPECT_EQ(b.ActiveComponents(), a.ActiveComponents());
  EXPECT_EQ(b.raw_head, 2u);
  EXPECT_EQ(b.raw_tail, 3u);
}

TEST(DckvArtifact, CorruptionIsDetected) {
  const auto bytes = MakeArtifact(8.0).Serialize();
  for (size_t i : {size_t{0}, size_t{5}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    auto bad = bytes;
    bad[i] ^= 0x10;
    EXPECT_STATUS(DckvArtifact::Parse(bad), kCorruption) << i;
  }
  for (size_t n : {size_t{0}, size_t{7}, size_t{8}, bytes.size() - 1}) {
    EXPECT_STATUS(DckvArtifact::Parse(std::span(bytes).first(n)), kCorruption) << n;
  }
  // Another version with a valid checksum: Mismatch.
  auto v2 = std::vector<uint8_t>(bytes.begin(), bytes.end() - 8);
  v2[4] = 2;  // the previous version
  ByteWriter(&v2).U64(Xxh3_64(v2));
  EXPECT_STATUS(DckvArtifact::Parse(v2), kMismatch);
}

}  // namespace
}  // namespace kvstash::dckv
