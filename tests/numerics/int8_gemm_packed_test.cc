// The packed GEMM and its activation quantiser (numerics/int8_gemm_packed.h) against
// the reference path (QuantizeRowsInt16/Int8 + Int16x8GemmGroupedNT / Int8GemmGroupedNT
// with the scalar backend): bit for bit, over size sweeps around the kernel's blocks
// (16 channels, 6 tokens, odd groups, short last groups), both backends, 1-3 threads.
#include "numerics/int8_gemm_packed.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "numerics/quantize.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_util.h"

namespace kvstash::spec {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) * ((rng() % 7 == 0) ? 30.0f : 1.0f);  // some outliers
  return v;
}

using ::kvstash::testing::SameBits;

// Reference: quantise rows, grouped GEMM with the portable scalar backend.
std::vector<float> Reference(const std::vector<float>& x, const Int8Rows& w, int m, int n, int k, int group,
                             int bits) {
  std::vector<float> out(static_cast<size_t>(m) * n);
  if (bits == 16) {
    Int16Rows a;
    EXPECT_OK(QuantizeRowsInt16(x, m, k, group, &a));
    EXPECT_OK(Int16x8GemmGroupedNT(a.q, a.scales, w.q, w.scales, out, m, n, k, group, GemmBackend::kScalar));
  } else {
    Int8Rows a;
    EXPECT_OK(QuantizeRowsInt8(x, m, k, group, &a));
    EXPECT_OK(Int8GemmGroupedNT(a.q, a.scales, w.q, w.scales, out, m, n, k, group, GemmBackend::kScalar));
  }
  return out;
}

TEST(PackedGemmTest, MatchesReferenceBitForBitOnSizeSweeps) {
  int cases = 0;
  for (int k : {1, 2, 3, 15, 16, 17, 127, 128, 129, 300}) {
    for (int group : {1, 3, 32, 128, 512}) {
      const int g = group;  // groups wider than k included: one group of k channels
      for (int n : {1, 15, 16, 17, 33}) {
        for (int m : {0, 1, 5, 6, 7, 13}) {
          for (int bits : {16, 8}) {
            const auto wf = RandomFloats(static_cast<size_t>(n) * k, 100 + k * 7 + n);
            const auto x = RandomFloats(static_cast<size_t>(m) * k, 200 + k * 3 + m);
            Int8Rows w;
            ASSERT_OK(QuantizeRowsInt8(wf, n, k, g, &w));
            PackedWeights pw;
            ASSERT_OK(PackWeights(w.q, w.scales, n, k, g, &pw));
            const auto want = Reference(x, w, m, n, k, g, bits);
            for (GemmBackend be : {GemmBackend::kScalar, GemmBackend::kAuto}) {
              for (int threads : {1, 2, 3}) {
                PackedActivations a;
                ASSERT_OK(QuantizeActivations(x, m, pw.shape, bits, be, threads, &a));
                std::vector<float> out(static_cast<size_t>(m) * n, -1.0f);
                ASSERT_OK(GemmPacked(a, pw, out, be, threads));
                ASSERT_TRUE(SameBits(out, want)) << "k=" << k << " group=" << g << " n=" << n << " m=" << m
                                                 << " bits=" << bits << " threads=" << threads;
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(PackedGemmTest, PerRowGroupOfWholeK) {
  // group = 0 packs one group per row (W8A8 per channel), K above 512.
  const int m = 7, n = 19, k = 1536;
  const auto wf = RandomFloats(static_cast<size_t>(n) * k, 1),
             x = RandomFloats(static_cast<size_t>(m) * k, 2);
  Int8Rows w;
  ASSERT_OK(QuantizeRowsInt8(wf, n, k, k, &w));
  PackedWeights pw;
  ASSERT_OK(PackWeights(w.q, w.scales, n, k, 0, &pw));
  EXPECT_EQ(pw.shape.group, k);
  PackedActivations a;
  ASSERT_OK(QuantizeActivations(x, m, pw.shape, 8, GemmBackend::kAuto, 2, &a));
  std::vector<float> out(static_cast<size_t>(m) * n);
  ASSERT_OK(GemmPacked(a, pw, out, GemmBackend::kAuto, 2));
  EXPECT_TRUE(SameBits(out, Reference(x, w, m, n, k, k, 8)));
  // The same group with 16-bit activations could overflow int32: refused.
  ASSERT_OK(QuantizeActivations(x, m, pw.shape, 16, GemmBackend::kAuto, 1, &a));
  EXPECT_STATUS(GemmPacked(a, pw, out, GemmBackend::kAuto, 1), kInvalidArgument);
}

TEST(PackedGemmTest, QuantiserMatchesReferenceOnSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  // Rows of 20: specials, ties, -0, an all-zero row, a row whose amax / Q underflows.
  std::vector<float> x = {1.0f,  -0.5f,  4.0f, nan,   -inf,   2.0f, 0.25f, -0.0f, 3.0f,  inf,
                          -4.0f, 1e-30f, 7.5f, -7.5f, 0.125f, nan,  1.0f,  2.0f,  -3.0f, 0.0f};
  x.resize(40, 0.0f);
  for (int i = 0; i < 20; ++i) x.push_back(i % 3 == 0 ? tiny : (i % 3 == 1 ? -tiny : 0.0f));
  const int m = 3, k = 20;
  for (int bits : {16, 8}) {
    for (int group : {1, 3, 8, 16, 20}) {
      PackedShape shape;
      ASSERT_OK(PackedShape::Make(k, group, &shape));
      PackedActivations fast, ref;
      ASSERT_OK(QuantizeActivations(x, m, shape, bits, GemmBackend::kAuto, 1, &fast));
      ASSERT_OK(QuantizeActivations(x, m, shape, bits, GemmBackend::kScalar, 1, &ref));
      EXPECT_EQ(fast.q, ref.q) << "bits=" << bits << " group=" << group;
      EXPECT_TRUE(SameBits(fast.scales, ref.scales));
      // The packed layout holds the reference quantiser's values.
      std::vector<int> want_q;
      std::vector<float> want_s;
      if (bits == 16) {
        Int16Rows r;
        ASSERT_OK(QuantizeRowsInt16(x, m, k, group, &r));
        want_q.assign(r.q.begin(), r.q.end());
        want_s = r.scales;
      } else {
        Int8Rows r;
        ASSERT_OK(QuantizeRowsInt8(x, m, k, group, &r));
        want_q.assign(r.q.begin(), r.q.end());
        want_s = r.scales;
      }
      EXPECT_TRUE(SameBits(fast.scales, want_s));
      for (int i = 0; i < m; ++i) {
        for (int c = 0; c < k; ++c) {
          const int g = c / group, p = g * shape.group_pairs * 2 + (c - g * group);
          ASSERT_EQ(fast.q[static_cast<size_t>(i) * shape.stride() + p],
                    want_q[static_cast<size_t>(i) * k + c])
              << "row " << i << " channel " << c << " group " << group;
        }
      }
    }
  }
}

TEST(PackedGemmTest, RejectsBadShapes) {
  PackedShape shape;
  EXPECT_STATUS(PackedShape::Make(0, 1, &shape), kInvalidArgument);
  EXPECT_STATUS(PackedShape::Make(4, 0, &shape), kInvalidArgument);
  ASSERT_OK(PackedShape::Make(4, 5, &shape));
  EXPECT_EQ(shape.group, 4);
  EXPECT_EQ(shape.groups, 1);
  std::vector<int8_t> w(12);
  std::vector<float> s(3);
  PackedWeights pw;
  EXPECT_STATUS(PackWeights(w, s, 3, 5, 5, &pw), kInvalidArgument);  // 12 != 3*5
  ASSERT_OK(PackWeights(w, s, 3, 4, 4, &pw));
  PackedActivations a;
  std::vector<float> x(8);
  EXPECT_STATUS(QuantizeActivations(x, 3, pw.shape, 16, GemmBackend::kAuto, 1, &a), kInvalidArgument);
  EXPECT_STATUS(QuantizeActivations(x, 2, pw.shape, 12, GemmBackend::kAuto, 1, &a), kInvalidArgument);
  ASSERT_OK(QuantizeActivations(x, 2, pw.shape, 16, GemmBackend::kAuto, 1, &a));
  std::vector<float> out(5);
  EXPECT_STATUS(GemmPacked(a, pw, out, GemmBackend::kAuto, 1), kInvalidArgument);  // needs 2*3
  PackedShape other;
  ASSERT_OK(PackedShape::Make(4, 2, &other));
  ASSERT_OK(QuantizeActivations(x, 2, other, 16, GemmBackend::kAuto, 1, &a));
  out.resize(6);
  EXPECT_STATUS(GemmPacked(a, pw, out, GemmBackend::kAuto, 1), kInvalidArgument);  // group differs
}

}  // namespace
}  // namespace kvstash::spec
