// The vectorised contexts (codec/spec/spec_context_avx512.cc, spec_context_avx2.cc)
// against the scalar body ScalarContext bit for bit, for bf16, f16 and fp8 e4m3 targets
// (fp8 at several per-tensor scales): random predictions of every magnitude,
// round-to-nearest ties of each target, NaNs of both signs and any payload, +-Inf, values
// that round up to Inf or saturate, each target's subnormals, f32 subnormals, +-0; NaN,
// infinite and extreme log2 sigmas; several bucket layouts; row lengths that leave every
// partial vector (masked tail / scalar tail). Each ISA's case prints SKIPPED on a CPU
// without it (or with KVSTASH_CPU_PATH ruling it out).
#include <gtest/gtest.h>

#include <array>
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
    case 5:
      return FromBits((any(rng) & 0xFFFFE000u) | 0x1000u);  // exact f16 tie (normal range)
    case 6:
      return FromBits((any(rng) & 0xFFF00000u) | 0x80000u);  // exact fp8 tie (normal range)
    case 7:  // around each target's overflow, subnormal and zero thresholds
      return FromBits((any(rng) & 0x80000000u) |
                      (std::array<uint32_t, 6>{0x477FF000u, 0x43E00000u, 0x38800000u, 0x33000000u,
                                               0x3C800000u, 0x3A800000u}[rng() % 6] +
                       static_cast<uint32_t>(static_cast<int>(rng() % 4097) - 2048)));
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

// The three targets, fp8 at scales that put the predictions across its whole range.
struct Target {
  const char* name;
  bool fp8, f16;
  float fp8_scale;
};
constexpr Target kTargets[] = {{"bf16", false, false, 1.0f},
                               {"f16", false, true, 1.0f},
                               {"fp8 scale 1", true, false, 1.0f},
                               {"fp8 scale 0.0371", true, false, 0.0371f},
                               {"fp8 scale 37.5", true, false, 37.5f}};

void ExpectEqualToScalar(ContextsFn fn, const Target& target) {
  SCOPED_TRACE(target.name);
  std::mt19937 rng(7);
  struct Layout {
    float s_min, step;
    uint32_t buckets, frac_bins;
  };
  for (const Layout c : {Layout{-3.0f, 0.25f, 64, 4}, Layout{-10.0f, 0.1f, 300, 7}, Layout{0.5f, 3.0f, 1, 1},
                         Layout{-8.0f, 0.5f, 4096, 16}}) {
    SpecContextParams p =
        MakeSpecContextParams(target.fp8, target.fp8_scale, c.s_min, c.step, c.buckets, c.frac_bins);
    p.f16 = target.f16;
    for (size_t row :
         {size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{192}}) {
      const size_t n = row * 151;
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
  for (const Target& t : kTargets) ExpectEqualToScalar(internal::ContextsAvx512, t);
}

TEST(SpecContextSimd, Avx2EqualsScalar) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSTASH_CPU_PATH rules it out)";
  for (const Target& t : kTargets) ExpectEqualToScalar(internal::ContextsAvx2, t);
}

}  // namespace
}  // namespace kvstash::spec
