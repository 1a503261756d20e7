// Deterministic elementary functions for the spec predictor (docs/architecture.md §3).
//
// READ ME FIRST
// - The spec decoder rebuilds the encoder's probabilities from its own predictor run,
//   so every floating-point result the predictor feeds into a table choice must be
//   bit-identical on every CPU and GPU. These functions use only IEEE-754 single
//   precision +, -, * (each correctly rounded, no fused multiply-add: the build uses
//   -ffp-contract=off and, on CUDA, explicit __fadd_rn/__fmul_rn), exact operations
//   (floor, comparisons, integer bit manipulation) and, where noted, IEEE division,
//   which is also correctly rounded and so identical everywhere. No libm call.
// - Accuracy is secondary to determinism: DetExp is within 2 ulp of exp on
//   [-87.3, 88.7] (flushes to 0 below: no subnormal results); DetRsqrt within 3 ulp.
// - The double-precision host helpers (e^x, erfc, log, sin/cos, used once to build
//   frequency and RoPE tables) are in numerics/det_math_double.h.
//
// Sources: Cody & Waite, "Software Manual for the Elementary Functions" (1980) for the
// argument reductions; Taylor coefficients for the polynomials; Newton-Raphson for
// rsqrt from the classic bit-level seed (Lomont, "Fast inverse square root", 2003).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "kvstash/dtype_bits.h"

namespace kvstash::spec {

// Correctly rounded single operations that no compiler may fuse.
KVSTASH_HD inline float DAdd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KVSTASH_HD inline float DSub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KVSTASH_HD inline float DMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVSTASH_HD inline float DDiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// 2^n as a float for -126 <= n <= 127 (exact).
KVSTASH_HD inline float Pow2i(int n) { return FromBits(static_cast<uint32_t>(n + 127) << 23); }

// Largest integer <= x, for |x| < 2^23 (exact; no libm).
KVSTASH_HD inline int FloorToInt(float x) {
  const int t = static_cast<int>(x);  // truncation toward zero, exact for |x| < 2^31
  return (static_cast<float>(t) > x) ? t - 1 : t;
}

// e^x. NaN -> NaN; x > 88.7228 -> +Inf; x < -87.3365 -> 0.
KVSTASH_HD inline float DetExp(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return FromBits(0x7F800000u);
  if (x < -87.33654022216796875f) return 0.0f;
  // n = round(x / ln2); r = x - n*ln2 in two parts (C1 has 9 significant bits, so
  // n*C1 is exact for |n| <= 128).
  const int n = FloorToInt(DAdd(DMul(x, 1.44269502162933349609375f), 0.5f));
  const float fn = static_cast<float>(n);
  const float r = DSub(DSub(x, DMul(fn, 0.693359375f)), DMul(fn, -2.12194440e-4f));
  // e^r, |r| <= 0.35, Taylor to degree 7 in Horner form.
  float p = 1.98412698e-4f;              // 1/5040
  p = DAdd(DMul(p, r), 1.38888889e-3f);  // 1/720
  p = DAdd(DMul(p, r), 8.33333333e-3f);  // 1/120
  p = DAdd(DMul(p, r), 4.16666667e-2f);  // 1/24
  p = DAdd(DMul(p, r), 1.66666667e-1f);  // 1/6
  p = DAdd(DMul(p, r), 0.5f);
  p = DAdd(DMul(p, r), 1.0f);
  p = DAdd(DMul(p, r), 1.0f);
  // Scale by 2^n in two exact steps so n = 128 or n = -126.. stays representable.
  const int n1 = n / 2;
  return DMul(DMul(p, Pow2i(n1)), Pow2i(n - n1));
}

// 1/sqrt(x). x = +0 -> +Inf; x < 0 or NaN -> NaN; +Inf -> 0.
KVSTASH_HD inline float DetRsqrt(float x) {
  if (!(x >= 0.0f)) return FromBits(0x7FC00000u);
  if (x == 0.0f) return FromBits(0x7F800000u);
  if (x == FromBits(0x7F800000u)) return 0.0f;
  float scale = 1.0f;
  if (x < 1.17549435e-38f) {     // subnormal: scale into the normal range first
    x = DMul(x, 1.8446744e19f);  // 2^64
    scale = 4.2949673e9f;        // 2^32
  }
  float y = FromBits(0x5F3759DFu - (Bits(x) >> 1));
  const float half_x = DMul(0.5f, x);
  for (int i = 0; i < 4; ++i) y = DMul(y, DSub(1.5f, DMul(half_x, DMul(y, y))));
  return DMul(y, scale);
}

// x * sigmoid(x) = x / (1 + e^-x) (SiLU / swish), with one IEEE division.
KVSTASH_HD inline float DetSilu(float x) { return DDiv(x, DAdd(1.0f, DetExp(-x))); }

}  // namespace kvstash::spec
