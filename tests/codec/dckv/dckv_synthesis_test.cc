// The tiled synthesis kernels (dckv_synthesis.h) against the defining loop: bit for
// bit on every path (portable, and AVX2 and AVX-512 where the CPU has them), including
// skipped zero coefficients and signed zeros, over sizes around the tiles (6 and 4/8/12
// rows) and panels (16 and 32 columns); and against a double-precision sum within the
// fp32 summation bound.
// Real SmolLM2 KV: dckv_model_test.cc.
#include "codec/dckv/dckv_synthesis.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvstash::dckv {
namespace {

struct Case {
  uint32_t rows, n_active, dims;
  std::vector<float> basis, mean, coef;
};

Case MakeCase(uint32_t rows, uint32_t n_active, uint32_t dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  Case c{rows, n_active, dims, {}, {}, {}};
  c.basis.resize(static_cast<size_t>(n_active) * dims);
  for (auto& v : c.basis) v = n01(rng) * 0.1f;
  c.mean.resize(dims);
  for (auto& v : c.mean) v = n01(rng);
  c.coef.resize(static_cast<size_t>(rows) * n_active);
  for (auto& v : c.coef) v = n01(rng) * 20.0f;
  // Every 5th coefficient exactly zero (skipped terms), some negative zeros.
  for (size_t i = 0; i < c.coef.size(); i += 5) c.coef[i] = (i % 2) ? -0.0f : 0.0f;
  return c;
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<uint32_t>(v[i]);
  return b;
}

std::vector<SynthesisPath> Paths() {
  std::vector<SynthesisPath> p = {SynthesisPath::kPortable};
  if (SynthesisHasAvx2()) p.push_back(SynthesisPath::kAvx2);
  if (SynthesisHasAvx512()) p.push_back(SynthesisPath::kAvx512);
  return p;
}

TEST(DckvSynthesis, PathsEqualReferenceBitForBit) {
  if (!SynthesisHasAvx2()) std::printf("[ note ] no AVX2 on this CPU: portable path only\n");
  uint32_t seed = 1;
  for (uint32_t rows : {0u, 1u, 5u, 6u, 7u, 13u}) {
    for (uint32_t n_active : {0u, 1u, 17u, 64u}) {
      for (uint32_t dims : {1u, 15u, 16u, 17u, 40u, 48u}) {
        const Case c = MakeCase(rows, n_active, dims, seed++);
        std::vector<float> want(static_cast<size_t>(rows) * dims);
        SynthesizeRowsReference(c.basis, n_active, dims, c.mean, c.coef, rows, want);
        const PackedBasis packed = PackBasis(c.basis, n_active, dims);
        for (SynthesisPath path : Paths()) {
          std::vector<float> got(want.size(), 123.0f);
          SynthesizeRows(packed, c.mean, c.coef, rows, got, path);
          EXPECT_EQ(Bits(got), Bits(want))
              << rows << " x " << n_active << " x " << dims << " path " << static_cast<int>(path);
        }
      }
    }
  }
}

// The AVX-512 kernel's tiles: 4, 8 or 12 rows (1 to 12 real) by two panels, around
// every row count and a last pair with one panel; with zero terms added as they are,
// and skipped (a -0.0 in the first panel's mean: the masked adds).
TEST(DckvSynthesis, Avx512EqualsReferenceBitForBit) {
  if (!SynthesisHasAvx512())
    GTEST_SKIP() << "no AVX-512 F/BW/DQ/VL on this CPU (or KVSTASH_CPU_PATH forbids it)";
  uint32_t seed = 1000;
  for (uint32_t rows : {1u, 3u, 4u, 5u, 8u, 9u, 11u, 12u, 13u, 23u, 24u, 25u, 32u}) {
    for (uint32_t n_active : {1u, 2u, 31u}) {
      for (uint32_t dims : {16u, 31u, 32u, 33u, 64u, 80u}) {
        for (bool skip : {false, true}) {
          Case c = MakeCase(rows, n_active, dims, seed++);
          if (skip) c.mean[dims / 3] = -0.0f;
          std::vector<float> want(static_cast<size_t>(rows) * dims), got(want.size(), 123.0f);
          SynthesizeRowsReference(c.basis, n_active, dims, c.mean, c.coef, rows, want);
          SynthesizeRows(PackBasis(c.basis, n_active, dims), c.mean, c.coef, rows, got,
                         SynthesisPath::kAvx512);
          EXPECT_EQ(Bits(got), Bits(want)) << rows << " x " << n_active << " x " << dims << " skip " << skip;
        }
      }
    }
  }
}

// Skipped terms leave signed zeros alone: mean -0 with all-zero coefficients stays -0
// (adding a +0 product would give +0); a zero coefficient next to non-zero ones in the
// same tile keeps the row's value.
TEST(DckvSynthesis, ZeroCoefficientsAreSkipped) {
  const uint32_t rows = 7, n_active = 3, dims = 16;
  Case c = MakeCase(rows, n_active, dims, 99);
  for (auto& v : c.mean) v = -0.0f;
  for (uint32_t i = 0; i < n_active; ++i) c.coef[i] = 0.0f;  // row 0: all zero
  const PackedBasis packed = PackBasis(c.basis, n_active, dims);
  for (SynthesisPath path : Paths()) {
    std::vector<float> got(static_cast<size_t>(rows) * dims);
    SynthesizeRows(packed, c.mean, c.coef, rows, got, path);
    for (uint32_t j = 0; j < dims; ++j) EXPECT_EQ(std::bit_cast<uint32_t>(got[j]), 0x80000000u) << j;
  }
}

// Zero terms the kernels add as plain products (finite basis, mean without -0.0) give
// the skipped terms' results: +0 means stay +0 under negative weights, and a panel
// with a -0.0 mean value, or a basis with an infinite weight behind a zero
// coefficient, takes the skip path.
TEST(DckvSynthesis, ZeroTermsAddedPlainEqualSkipped) {
  const uint32_t rows = 13, n_active = 9, dims = 40;
  for (int variant = 0; variant < 3; ++variant) {
    Case c = MakeCase(rows, n_active, dims, 7 + variant);
    for (auto& w : c.basis) w = -std::abs(w);
    for (uint32_t j = 0; j < dims; ++j) c.mean[j] = j % 3 == 0 ? 0.0f : c.mean[j];
    for (uint32_t r = 0; r < rows; r += 2) {
      for (uint32_t i = 0; i < n_active; ++i) c.coef[r * n_active + i] = (i % 2) ? -0.0f : 0.0f;
    }
    if (variant == 1) c.mean[20] = -0.0f;  // the second panel takes the skip path
    if (variant == 2) {                    // an infinite weight only ever times zero
      c.coef[0] = 0.0f;
      for (uint32_t r = 1; r < rows; ++r) c.coef[r * n_active] = 0.0f;
      c.basis[3] = std::numeric_limits<float>::infinity();
    }
    std::vector<float> want(static_cast<size_t>(rows) * dims);
    SynthesizeRowsReference(c.basis, n_active, dims, c.mean, c.coef, rows, want);
    const PackedBasis packed = PackBasis(c.basis, n_active, dims);
    for (SynthesisPath path : Paths()) {
      std::vector<float> got(want.size());
      SynthesizeRows(packed, c.mean, c.coef, rows, got, path);
      EXPECT_EQ(Bits(got), Bits(want)) << "variant " << variant << " path " << static_cast<int>(path);
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(want[0]), 0u);  // +0 mean, every term zero
  }
}

// Against the exact sum (double): |x - x*| <= gamma_n * (|mean| + sum |c_i w_i|) with
// gamma_n = n u / (1 - n u), n = n_active + 1 roundings of the running sum plus one
// per product, u = 2^-24 (Higham, Accuracy and Stability, §3.1 and §4.2).
TEST(DckvSynthesis, WithinFp32BoundOfDoubleSum) {
  const Case c = MakeCase(13, 300, 40, 5);
  const PackedBasis packed = PackBasis(c.basis, c.n_active, c.dims);
  std::vector<float> got(static_cast<size_t>(c.rows) * c.dims);
  SynthesizeRows(packed, c.mean, c.coef, c.rows, got);
  const double u = std::ldexp(1.0, -24), n = c.n_active + 2.0, gamma = n * u / (1 - n * u);
  double worst = 0;
  for (uint32_t r = 0; r < c.rows; ++r) {
    for (uint32_t j = 0; j < c.dims; ++j) {
      double exact = c.mean[j], mag = std::abs(c.mean[j]);
      for (uint32_t i = 0; i < c.n_active; ++i) {
        const double t = double(c.coef[r * c.n_active + i]) * c.basis[i * c.dims + j];
        exact += t;
        mag += std::abs(t);
      }
      const double err = std::abs(got[r * c.dims + j] - exact);
      ASSERT_LE(err, gamma * mag) << r << " " << j;
      worst = std::max(worst, err / (gamma * mag));
    }
  }
  EXPECT_GT(worst, 0.0);  // the comparison saw rounding at all
}

}  // namespace
}  // namespace kvstash::dckv
