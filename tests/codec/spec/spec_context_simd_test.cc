// The vectorised bf16 contexts (codec/spec/spec_context_avx512.cc, spec_context_avx2.cc)
// against the scalar body ScalarContext bit for bit: random predictions of every
// magnitude, round-to-nearest ties, NaNs of both signs and any payload, +-Inf, values that
// round up to Inf, subnormals, +-0; NaN, infinite and extreme log2 sigmas; several bucket
// layouts; row lengths that leave every partial vector (masked tail / scalar tail). Each
// ISA's case prints SKIPPED on a CPU without it (or with KVSTASH_CPU_PATH ruling it out).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codec/spec/spec_context_simd.h"
#include "numerics/int8_gemm.h"

namespace kvstash::spec {
namespace {

using ContextsFn = void (*)(const SpecContextParams&, const float*, size_t, const float*, size_t, uint16_t*,
                            uint16_t*);

// A prediction drawn from a mix of ordinary values and the special patterns above.
float Prediction(std::mt19937& rng) {
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_real_distribution<float> mag(-40.0f, 40.0f);
  switch (rng() % 10) {
    case 0:
      return FromBits(any(rng));  // any pattern: NaNs, Inf, subnormals included
    case 1:
      return FromBits((any(rng) & 0xFFFF0000u) | 0x8000u);  // exact bf16 tie
    case 2:
      return FromBits((any(rng) & 0x807FFFFFu) | 0x7F800000u);  // +-Inf or NaN
    case 3:
      return FromBits(any(rng) & 0x807FFFFFu);  // subnormal or +-0
    case 4:
      return FromBits((any(rng) & 0x80000000u) | (0x7F7F8000u + (any(rng) & 0x7FFFu)));  // rounds to Inf
    default:
      return std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng), static_cast<int>(mag(rng)));
  }
}

float Log2Sigma(std::mt19937& rng) {
  switch (rng() % 16) {
    case 0:
      return FromBits(0x7FC00000u + (rng() & 0xFFFu));  // NaN
    case 1:
      return (rng() & 1) ? FromBits(0x7F800000u) : FromBits(0xFF800000u);
    case 2:
      return (rng() & 1) ? 3e38f : -3e38f;
    default:
      return std::uniform_real_distribution<float>(-60.0f, 60.0f)(rng);
  }
}

void ExpectEqualToScalar(ContextsFn fn) {
  std::mt19937 rng(7);
  struct Layout {
    float s_min, step;
    uint32_t buckets, frac_bins;
  };
  for (const Layout c : {Layout{-3.0f, 0.25f, 64, 4}, Layout{-10.0f, 0.1f, 300, 7}, Layout{0.5f, 3.0f, 1, 1},
                         Layout{-8.0f, 0.5f, 4096, 16}}) {
    const SpecContextParams p = MakeSpecContextParams(false, 1.0f, c.s_min, c.step, c.buckets, c.frac_bins);
    for (size_t row : {size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{192}}) {
      const size_t n = row * 37;
      std::vector<float> mu(n), ls(row);
      for (float& v : mu) v = Prediction(rng);
      for (float& v : ls) v = Log2Sigma(rng);
      std::vector<uint16_t> want_ord(n), want_table(n), got_ord(n, 0xABCD), got_table(n, 0xABCD);
      for (size_t i = 0; i < n; ++i) ScalarContext(p, mu[i], ls[i % row], &want_ord[i], &want_table[i]);
      fn(p, mu.data(), n, ls.data(), row, got_ord.data(), got_table.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got_ord[i], want_ord[i]) << "row " << row << " i " << i << " mu bits " << Bits(mu[i]);
        ASSERT_EQ(got_table[i], want_table[i]) << "row " << row << " i " << i << " mu bits " << Bits(mu[i])
                                               << " log2 sigma " << ls[i % row] << " buckets " << c.buckets;
      }
    }
  }
}

TEST(SpecContextSimd, Avx512EqualsScalar) {
  if (!CpuHasAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or KVSTASH_CPU_PATH rules it out)";
  ExpectEqualToScalar(internal::Bf16ContextsAvx512);
}

TEST(SpecContextSimd, Avx2EqualsScalar) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSTASH_CPU_PATH rules it out)";
  ExpectEqualToScalar(internal::Bf16ContextsAvx2);
}

}  // namespace
}  // namespace kvstash::spec
