// The AMX tile packed GEMM (numerics/int8_gemm_packed_amx.cc), forced with
// GemmBackend::kAmx, against the scalar reference bit for bit: every shape the kernel
// takes (group lengths multiples of 64, incl. a shorter last group), n not a multiple
// of 16 or 32, m around its 16-token tiles, int8 and int16 activations, extreme
// operands at the int32 limit (where 256 * dot_hi alone overflows), 1-3 threads; and
// that shapes it cannot take fall back to the VNNI kernel with the same bits. Prints
// SKIPPED on a CPU without AMX (or with KVSTASH_CPU_PATH other than auto).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "numerics/int8_gemm_packed.h"
#include "numerics/quantize.h"
#include "tests/numerics/gemm_operands.h"
#include "tests/support/test_util.h"

namespace kvstash::spec {
namespace {

using testing::MakeOperands;
using testing::Operands;
using testing::SameBits;

class PackedGemmAmxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuHasAmx()) {
      GTEST_SKIP() << "this CPU has no AMX-TILE/AMX-INT8 with AVX-512 (or the OS refused the tile state, "
                      "or KVSTASH_CPU_PATH is not auto): nothing to compare";
    }
  }

  // kAmx (1-3 threads) against the scalar reference; group lengths multiples of 64
  // (group <= k), so the packed row is the plain row [k].
  static void Check(const Operands& o, int m, int n, int k, int group, int bits) {
    PackedWeights pw;
    ASSERT_OK(PackWeights(o.w, o.w_scale, n, k, group, &pw));
    ASSERT_TRUE(pw.shape.AmxShape());
    ASSERT_EQ(pw.amx.size(), pw.data.size()) << "PackWeights did not fill the AMX layout";
    PackedActivations a;
    a.shape = pw.shape;
    a.m = m;
    a.bits = bits;
    a.q = o.a;
    a.scales = o.a_scale;
    internal::SplitForAmx(&a);
    std::vector<float> want(static_cast<size_t>(m) * n);
    if (bits == 16) {
      ASSERT_OK(
          Int16x8GemmGroupedNT(o.a, o.a_scale, o.w, o.w_scale, want, m, n, k, group, GemmBackend::kScalar));
    } else {
      std::vector<int8_t> a8(o.a.begin(), o.a.end());
      ASSERT_OK(Int8GemmGroupedNT(a8, o.a_scale, o.w, o.w_scale, want, m, n, k, group, GemmBackend::kScalar));
    }
    for (int threads : {1, 2, 3}) {
      std::vector<float> out(static_cast<size_t>(m) * n, -1.0f);
      ASSERT_OK(GemmPacked(a, pw, out, GemmBackend::kAmx, threads));
      ASSERT_TRUE(SameBits(out, want)) << "m=" << m << " n=" << n << " k=" << k << " group=" << group
                                       << " bits=" << bits << " threads=" << threads;
    }
  }
};

TEST_F(PackedGemmAmxTest, MatchesReferenceOnItsShapes) {
  int cases = 0;
  for (int k : {64, 128, 192, 576, 1536}) {
    for (int group : {64, 128, 192, 512}) {
      if (group > k || group % 64 != 0 || (k % group) % 64 != 0) continue;
      if (group > 512) continue;
      const int groups = (k + group - 1) / group;
      for (int n : {1, 15, 16, 17, 31, 33, 49}) {
        for (int m : {1, 2, 5, 13, 15, 16, 17, 33}) {
          for (int bits : {16, 8}) {
            Check(MakeOperands(m, n, k, groups, bits, false, 1000 * k + 100 * n + 10 * m + bits + group), m,
                  n, k, group, bits);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 800);
  // The predictor's shapes (k 576 and 1536, group 128).
  Check(MakeOperands(37, 832, 576, 5, 16, false, 11), 37, 832, 576, 128, 16);
  Check(MakeOperands(29, 576, 1536, 12, 16, false, 12), 29, 576, 1536, 128, 16);
}

TEST_F(PackedGemmAmxTest, ExtremeOperandsAtTheInt32Limit) {
  // One group of 512: |dot| up to 32767 * 128 * 512 = 2,147,418,112; dot_hi * 256 then
  // reaches 2^31 and wraps, the sum with dot_lo does not.
  for (int m : {1, 16, 17}) {
    for (int n : {16, 33}) {
      Check(MakeOperands(m, n, 512, 1, 16, true, 5 + m + n), m, n, 512, 512, 16);
      Check(MakeOperands(m, n, 1024, 2, 16, true, 6 + m + n), m, n, 1024, 512, 16);
      Check(MakeOperands(m, n, 576, 5, 8, true, 7 + m + n), m, n, 576, 128, 8);
    }
  }
  for (int bits : {16, 8}) {
    const int k = 512, m = 17, n = 33;
    Operands o = MakeOperands(m, n, k, 1, bits, true, 9);
    for (auto& v : o.a) v = static_cast<int16_t>(bits == 16 ? -32767 : -128);
    for (auto& w : o.w) w = -128;
    Check(o, m, n, k, k, bits);
    for (auto& w : o.w) w = 127;
    Check(o, m, n, k, k, bits);
    for (auto& v : o.a) v = static_cast<int16_t>(bits == 16 ? 32767 : 127);
    Check(o, m, n, k, k, bits);
  }
}

TEST_F(PackedGemmAmxTest, QuantisedPathAndFallbackMatchOtherBackends) {
  // QuantizeActivations + GemmPacked for every backend; group 128 takes the tiles,
  // group 32 (not a multiple of 64) falls back to the VNNI kernel under kAmx.
  const int m = 41, n = 200, k = 576;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n) * k), x(static_cast<size_t>(m) * k);
  for (auto& v : wf) v = d(rng);
  for (auto& v : x) v = d(rng) * (rng() % 9 == 0 ? 40.0f : 1.0f);
  for (int group : {128, 32}) {
    Int8Rows w;
    ASSERT_OK(QuantizeRowsInt8(wf, n, k, group, &w));
    PackedWeights pw;
    ASSERT_OK(PackWeights(w.q, w.scales, n, k, group, &pw));
    EXPECT_EQ(pw.amx.empty(), group == 32);
    for (int bits : {16, 8}) {
      std::vector<float> want;
      for (GemmBackend be : {GemmBackend::kScalar, GemmBackend::kAvx2, GemmBackend::kAvx512,
                             GemmBackend::kAmx, GemmBackend::kAuto}) {
        PackedActivations a;
        ASSERT_OK(QuantizeActivations(x, m, pw.shape, bits, be, 2, &a));
        EXPECT_EQ(a.amx_hi.empty(), group == 32 || (be != GemmBackend::kAmx && be != GemmBackend::kAuto));
        std::vector<float> out(static_cast<size_t>(m) * n);
        ASSERT_OK(GemmPacked(a, pw, out, be, 2));
        if (want.empty()) want = out;
        EXPECT_TRUE(SameBits(out, want))
            << "backend " << static_cast<int>(be) << " bits " << bits << " group " << group;
      }
    }
  }
}

TEST(PackedGemmAmxDispatch, NotSupportedWithoutAmx) {
  if (CpuHasAmx()) GTEST_SKIP() << "this CPU has AMX: the NotSupported path is checked on CPUs without it";
  PackedWeights pw;
  std::vector<int8_t> w(64);
  std::vector<float> s(1);
  ASSERT_OK(PackWeights(w, s, 1, 64, 64, &pw));
  EXPECT_TRUE(pw.amx.empty());
  std::vector<float> x(64, 1.0f), out(1);
  PackedActivations a;
  EXPECT_STATUS(QuantizeActivations(x, 1, pw.shape, 16, GemmBackend::kAmx, 1, &a), kNotSupported);
  ASSERT_OK(QuantizeActivations(x, 1, pw.shape, 16, GemmBackend::kAuto, 1, &a));
  EXPECT_TRUE(a.amx_hi.empty());
  EXPECT_STATUS(GemmPacked(a, pw, out, GemmBackend::kAmx, 1), kNotSupported);
  EXPECT_OK(GemmPacked(a, pw, out, GemmBackend::kAuto, 1));
}

}  // namespace
}  // namespace kvstash::spec
