// The AVX-512 VNNI packed GEMM (numerics/int8_gemm_packed_avx512.cc), forced with
// GemmBackend::kAvx512, against the scalar reference bit for bit: odd shapes around its
// register block (12 tokens x 2 blocks of 16 channels) and its L2 row tiles, odd and
// short groups, int8 and int16 activations, extreme operands at the int32 limit, 1-3
// threads (odd block ranges per thread). Prints SKIPPED on a CPU without AVX-512 (or
// with KVSTASH_CPU_PATH=avx2 / scalar), where kAvx512 must be NotSupported instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "numerics/int8_gemm_packed.h"
#include "numerics/quantize.h"
#include "tests/numerics/gemm_operands.h"
#include "tests/support/test_util.h"

namespace kvstash::spec {
namespace {

// Activations given as int16 rows [m, k] and scales [m, groups], in the packed layout.
PackedActivations PackRows(const std::vector<int16_t>& q, const std::vector<float>& scales, int m,
                           const PackedShape& s, int bits) {
  PackedActivations a;
  a.shape = s;
  a.m = m;
  a.bits = bits;
  a.q.assign(static_cast<size_t>(m) * s.stride(), 0);
  a.scales = scales;
  for (int i = 0; i < m; ++i) {
    for (int c = 0; c < s.k; ++c) {
      const int g = c / s.group;
      a.q[static_cast<size_t>(i) * s.stride() + 2 * g * s.group_pairs + (c - g * s.group)] =
          q[static_cast<size_t>(i) * s.k + c];
    }
  }
  return a;
}

using testing::MakeOperands;
using testing::Operands;
using testing::SameBits;

std::vector<float> Reference(const Operands& o, int m, int n, int k, int group, int bits) {
  std::vector<float> out(static_cast<size_t>(m) * n);
  if (bits == 16) {
    EXPECT_OK(
        Int16x8GemmGroupedNT(o.a, o.a_scale, o.w, o.w_scale, out, m, n, k, group, GemmBackend::kScalar));
  } else {
    std::vector<int8_t> a8(o.a.begin(), o.a.end());
    EXPECT_OK(Int8GemmGroupedNT(a8, o.a_scale, o.w, o.w_scale, out, m, n, k, group, GemmBackend::kScalar));
  }
  return out;
}

class PackedGemmAvx512Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuHasAvx512()) {
      GTEST_SKIP() << "this CPU has no AVX-512 F/BW/DQ/VL/VNNI (or KVSTASH_CPU_PATH forbids it): "
                      "nothing to compare";
    }
  }

  // Checks kAvx512 (1-3 threads) against the reference and the packed scalar loop.
  static void Check(const Operands& o, int m, int n, int k, int group, int bits) {
    PackedWeights pw;
    ASSERT_OK(PackWeights(o.w, o.w_scale, n, k, group, &pw));
    const PackedActivations a = PackRows(o.a, o.a_scale, m, pw.shape, bits);
    const auto want = Reference(o, m, n, k, pw.shape.group, bits);
    std::vector<float> scalar(static_cast<size_t>(m) * n, -1.0f);
    ASSERT_OK(GemmPacked(a, pw, scalar, GemmBackend::kScalar, 1));
    ASSERT_TRUE(SameBits(scalar, want));
    for (int threads : {1, 2, 3}) {
      std::vector<float> out(static_cast<size_t>(m) * n, -1.0f);
      ASSERT_OK(GemmPacked(a, pw, out, GemmBackend::kAvx512, threads));
      ASSERT_TRUE(SameBits(out, want)) << "m=" << m << " n=" << n << " k=" << k << " group=" << group
                                       << " bits=" << bits << " threads=" << threads;
    }
  }
};

TEST_F(PackedGemmAvx512Test, MatchesReferenceOnOddShapes) {
  int cases = 0;
  for (int k : {1, 3, 17, 128, 129, 300}) {
    for (int group : {1, 7, 32, 128, 255}) {
      const int g = std::min(group, k), groups = (k + g - 1) / g;
      for (int n : {1, 15, 16, 17, 31, 32, 33, 47, 49, 65}) {
        for (int m = 1; m <= 13; ++m) {
          for (int bits : {16, 8}) {
            const Operands o = MakeOperands(m, n, k, groups, bits, false, 1000 * k + 100 * n + 10 * m + bits);
            Check(o, m, n, k, g, bits);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 7000);
}

TEST_F(PackedGemmAvx512Test, MatchesReferenceAcrossRowTiles) {
  // k = 3000 (group 512: 6 groups, the last one 440 channels): 12,000-byte rows, so the
  // kernel's L2 row tile is 12 tokens; m = 12 * 5 + 7 crosses four tile boundaries and
  // ends on a partial register block. n = 16 * 7 + 5: 8 blocks, odd per thread at 3.
  const int m = 67, n = 117, k = 3000, group = 512, groups = 6;
  for (int bits : {16, 8}) Check(MakeOperands(m, n, k, groups, bits, false, 7 + bits), m, n, k, group, bits);
  // The model's shapes: k 576 and 1536, group 128.
  Check(MakeOperands(40, 832, 576, 5, 16, false, 11), 40, 832, 576, 128, 16);
  Check(MakeOperands(29, 576, 1536, 12, 16, false, 12), 29, 576, 1536, 128, 16);
}

TEST_F(PackedGemmAvx512Test, ExtremeOperandsAtTheInt32Limit) {
  // |dot| up to 32767 * 128 * 512 = 2,147,418,112 < 2^31 in one group of 512 (int16),
  // and 127 * 128 * 1536 for a whole-row group of 8-bit activations.
  for (int m : {1, 12, 13}) {
    for (int n : {16, 33}) {
      Check(MakeOperands(m, n, 512, 1, 16, true, 5 + m + n), m, n, 512, 512, 16);
      Check(MakeOperands(m, n, 1024, 2, 16, true, 6 + m + n), m, n, 1024, 512, 16);
      Check(MakeOperands(m, n, 1536, 1, 8, true, 7 + m + n), m, n, 1536, 1536, 8);
      Check(MakeOperands(m, n, 257, 3, 16, true, 8 + m + n), m, n, 257, 128, 16);
    }
  }
  // All products at their extreme with one sign: every lane's sum at the limit.
  for (int bits : {16, 8}) {
    const int k = bits == 16 ? 512 : 1536, m = 13, n = 33;
    Operands o = MakeOperands(m, n, k, 1, bits, true, 9);
    for (size_t i = 0; i < o.a.size(); ++i) o.a[i] = static_cast<int16_t>(bits == 16 ? -32767 : -128);
    for (auto& w : o.w) w = -128;
    Check(o, m, n, k, k, bits);
    for (auto& w : o.w) w = 127;
    Check(o, m, n, k, k, bits);
  }
}

TEST_F(PackedGemmAvx512Test, QuantisedActivationsMatchAvx2AndScalar) {
  // The predictor's path: QuantizeActivations then GemmPacked, all three backends.
  const int m = 25, n = 200, k = 576;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n) * k), x(static_cast<size_t>(m) * k);
  for (auto& v : wf) v = d(rng);
  for (auto& v : x) v = d(rng) * (rng() % 9 == 0 ? 40.0f : 1.0f);
  Int8Rows w;
  ASSERT_OK(QuantizeRowsInt8(wf, n, k, 128, &w));
  PackedWeights pw;
  ASSERT_OK(PackWeights(w.q, w.scales, n, k, 128, &pw));
  for (int bits : {16, 8}) {
    std::vector<float> want;
    for (GemmBackend be :
         {GemmBackend::kScalar, GemmBackend::kAvx2, GemmBackend::kAvx512, GemmBackend::kAuto}) {
      PackedActivations a;
      ASSERT_OK(QuantizeActivations(x, m, pw.shape, bits, be, 2, &a));
      std::vector<float> out(static_cast<size_t>(m) * n);
      ASSERT_OK(GemmPacked(a, pw, out, be, 2));
      if (want.empty()) want = out;
      EXPECT_TRUE(SameBits(out, want)) << "backend " << static_cast<int>(be) << " bits " << bits;
    }
  }
}

TEST(PackedGemmAvx512Dispatch, NotSupportedWithoutAvx512) {
  if (CpuHasAvx512())
    GTEST_SKIP() << "this CPU has AVX-512: the NotSupported path is checked on CPUs without it";
  PackedWeights pw;
  std::vector<int8_t> w(4);
  std::vector<float> s(1);
  ASSERT_OK(PackWeights(w, s, 1, 4, 4, &pw));
  std::vector<float> x(4, 1.0f), out(1);
  PackedActivations a;
  ASSERT_OK(QuantizeActivations(x, 1, pw.shape, 16, GemmBackend::kScalar, 1, &a));
  EXPECT_STATUS(GemmPacked(a, pw, out, GemmBackend::kAvx512, 1), kNotSupported);
  EXPECT_OK(GemmPacked(a, pw, out, GemmBackend::kAuto, 1));
}

}  // namespace
}  // namespace kvstash::spec
