#include "numerics/int8_gemm.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/support/test_util.h"

namespace kvstash::spec {
namespace {

std::vector<int8_t> RandomInt8(size_t n, uint32_t seed, bool extremes = false) {
  std::mt19937 rng(seed);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = extremes ? (rng() % 2 ? 127 : -128) : static_cast<int8_t>(rng() % 255 - 127);
  return v;
}

std::vector<int32_t> Naive(const std::vector<int8_t>& a, const std::vector<int8_t>& b, int m, int n, int k) {
  std::vector<int32_t> c(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int t = 0; t < k; ++t) s += int64_t{a[i * k + t]} * b[j * k + t];
      c[i * n + j] = static_cast<int32_t>(s);
    }
  return c;
}

TEST(Int8GemmTest, AllBackendsAndThreadCountsMatchNaive) {
  for (int k : {0, 1, 15, 16, 17, 31, 64, 127, 128, 129, 576}) {
    for (auto [m, n] : std::vector<std::pair<int, int>>{{1, 1}, {3, 5}, {7, 8}, {16, 9}}) {
      const auto a = RandomInt8(static_cast<size_t>(m) * k, 10 + k);
      const auto b = RandomInt8(static_cast<size_t>(n) * k, 20 + k);
      const auto want = Naive(a, b, m, n, k);
      for (GemmBackend be : {GemmBackend::kScalar, GemmBackend::kAvx2}) {
        if (be == GemmBackend::kAvx2 && !CpuHasAvx2()) continue;
        for (int threads : {1, 2, 3}) {
          std::vector<int32_t> c(static_cast<size_t>(m) * n, -1);
          ASSERT_OK(Int8GemmNT(a, b, c, m, n, k, be, threads));
          ASSERT_EQ(c, want) << "k=" << k << " m=" << m << " n=" << n;
        }
      }
    }
  }
}

TEST(Int8GemmTest, ExtremeValuesDoNotSaturate) {
  // -128 * -128 pairs would saturate vpmaddubsw's int16 sums; vpmaddwd must not.
  const int m = 2, n = 4, k = 1024;
  const auto a = RandomInt8(m * k, 1, true), b = RandomInt8(n * k, 2, true);
  std::vector<int32_t> c(m * n);
  ASSERT_OK(Int8GemmNT(a, b, c, m, n, k));
  EXPECT_EQ(c, Naive(a, b, m, n, k));
  std::vector<int8_t> all_min(k, -128);
  std::vector<int32_t> one(1);
  ASSERT_OK(Int8GemmNT(all_min, all_min, one, 1, 1, k));
  EXPECT_EQ(one[0], 128 * 128 * k);
}

TEST(Int8GemmTest, GroupedMatchesReferenceOrderBitForBit) {
  const int m = 5, n = 11, k = 300, group = 128, groups = 3;
  const auto a = RandomInt8(m * k, 7), b = RandomInt8(n * k, 8);
  std::vector<float> sa(m * groups), sb(n * groups);
  std::mt19937 rng(9);
  for (auto& s : sa) s = 0.001f + (rng() % 1000) * 1e-5f;
  for (auto& s : sb) s = 0.002f + (rng() % 1000) * 1e-5f;
  std::vector<float> want(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        int32_t d = 0;
        for (int t = g * group; t < std::min(k, (g + 1) * group); ++t) d += a[i * k + t] * b[j * k + t];
        const float s = sa[i * groups + g] * sb[j * groups + g];
        acc = acc + static_cast<float>(d) * s;
      }
      want[i * n + j] = acc;
    }
  for (GemmBackend be : {GemmBackend::kScalar, GemmBackend::kAuto}) {
    for (int threads : {1, 2}) {
      std::vector<float> out(m * n);
      ASSERT_OK(Int8GemmGroupedNT(a, sa, b, sb, out, m, n, k, group, be, threads));
      for (int i = 0; i < m * n; ++i) ASSERT_EQ(out[i], want[i]) << i;
    }
  }
}

TEST(Int8GemmTest, RejectsBadShapes) {
  std::vector<int8_t> a(6), b(6);
  std::vector<int32_t> c(4);
  EXPECT_STATUS(Int8GemmNT(a, b, c, 2, 2, 4), kInvalidArgument);
  EXPECT_STATUS(Int8GemmNT(a, b, c, -1, 2, 3), kInvalidArgument);
  std::vector<float> out(4), sa(2), sb(1);
  EXPECT_STATUS(Int8GemmGroupedNT(a, sa, b, sb, out, 2, 2, 3, 3), kInvalidArgument);
  EXPECT_STATUS(Int8GemmGroupedNT(a, sa, b, sa, out, 2, 2, 3, 0), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::spec

namespace kvstash::spec {
namespace {

TEST(Int16GemmTest, MatchesNaiveAtExtremesAndRejectsLargeGroups) {
  const int m = 3, n = 5, k = 1030, group = 512, groups = 3;
  std::vector<int16_t> a(m * k);
  std::vector<int8_t> b(n * k);
  std::mt19937 rng(11);
  for (auto& x : a)
    x = (rng() % 3 == 0) ? (rng() % 2 ? 32767 : -32767) : static_cast<int16_t>(rng() % 65535 - 32767);
  for (auto& x : b) x = (rng() % 3 == 0) ? -128 : static_cast<int8_t>(rng() % 255 - 127);
  std::vector<float> sa(m * groups, 1.0f), sb(n * groups, 1.0f);
  std::vector<float> want(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        int64_t d = 0;
        for (int t = g * group; t < std::min(k, (g + 1) * group); ++t)
          d += int64_t{a[i * k + t]} * b[j * k + t];
        acc = acc + static_cast<float>(d);
      }
      want[i * n + j] = acc;
    }
  for (GemmBackend be : {GemmBackend::kScalar, GemmBackend::kAuto}) {
    std::vector<float> out(m * n);
    ASSERT_OK(Int16x8GemmGroupedNT(a, sa, b, sb, out, m, n, k, group, be, 2));
    EXPECT_EQ(out, want);
  }
  std::vector<float> out(m * n), sa2(m * 2), sb2(n * 2);
  EXPECT_STATUS(Int16x8GemmGroupedNT(a, sa2, b, sb2, out, m, n, k, 1024), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::spec
