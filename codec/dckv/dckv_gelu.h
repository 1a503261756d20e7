// The GELU of the dckv correction nets, evaluated with plain fp32 operations in a
// fixed order so that it returns the same bits on every machine (no libm
// transcendental: erff/tanhf/expf may differ between libm versions and CPU dispatch
// variants). The decoder's content checksum relies on this; a GPU decoder must
// reproduce it operation by operation (IEEE division, no fused multiply-add).
//
// Definition (normative, docs/format/dckv.md "Correction nets"), every step one fp32
// operation rounded to nearest even:
//   a  = min(a, 16384); a = (a >= -16384) ? a : -16384   (NaN -> -16384, +-inf -> +-16384)
//   v  = 1.5957691f * (a + 0.044715f * ((a * a) * a))     (2 sqrt(2/pi) (a + 0.044715 a^3))
//   v  = clamp(v, -80, 80)
//   s  = 1 / (1 + Exp(-v))                                (the logistic sigmoid)
//   GELU(a) = a * s
// i.e. the tanh form 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) (Hendrycks and
// Gimpel, "Gaussian Error Linear Units", 2016; PyTorch gelu(approximate="tanh")),
// since 0.5 (1 + tanh(u)) = sigmoid(2u). A trainer should train with that form.
// Exp(t), t in [-80, 80]: Cody-Waite reduction n = round(t log2 e) (by adding and
// subtracting 1.5 * 2^23), r = (t - n * 0.693359375) - n * -2.12194440e-4, the Cephes
// expf polynomial p(r) (coefficients below) with e^r ~= 1 + r + r^2 p(r),
// scaled exactly by 2^n (bit construction; n in [-116, 116] keeps it normal).
//
// Accuracy (tests/codec/dckv/dckv_gelu_test.cc, sweep of [-20, 20] in steps of 2^-10):
// |GELU(a) - a Phi(a)| <= 4.8e-4 absolute against the exact GELU (std::erf in double;
// measured 4.73e-4 at a = 2.70: the tanh form's own error), and within 1.2e-5 relative
// + 1e-33 absolute, and 1e-6 absolute, of the tanh form evaluated in double (measured
// 9.2e-6 relative: fp32 rounding of v amplified by e^v in the negative tail; 5.1e-7
// absolute). Exp is within 3 fp32 ulp of exp in double on [-80, 80]. Inputs beyond
// +-16384 are clamped (the exact GELU is a or 0 there to fp32 precision anyway; the
// clamp keeps every output finite so the nets never create inf or NaN).
//
// Written once for host and device (KVSTASH_HD inline, numerics/det_math.h operations:
// plain operators under the host's -ffp-contract=off, __fmul_rn / __fadd_rn / __fsub_rn /
// __fdiv_rn on the device), so the CUDA dckv decoder (dckv_decode_element.h) evaluates
// the same bits as the CPU.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "numerics/det_math.h"

namespace kvstash::dckv {

inline constexpr float kGeluClamp = 16384.0f;

// e^t for t in [-80, 80] as defined above. REQUIRES -80 <= t <= 80 (not checked).
KVSTASH_HD inline float GeluExp(float t) {
  using spec::DAdd, spec::DMul, spec::DSub;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound - kRound rounds x to an integer
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  // Cephes expf: e^r ~= 1 + r + r^2 p(r) for |r| <= ln(2) / 2.
  constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
  constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
  const float n = DSub(DAdd(DMul(t, kLog2e), kRound), kRound);
  float r = DSub(t, DMul(n, kLn2Hi));
  r = DSub(r, DMul(n, kLn2Lo));
  float p = kP0;
  p = DAdd(DMul(p, r), kP1);
  p = DAdd(DMul(p, r), kP2);
  p = DAdd(DMul(p, r), kP3);
  p = DAdd(DMul(p, r), kP4);
  p = DAdd(DMul(p, r), kP5);
  const float y = DAdd(DAdd(DMul(p, DMul(r, r)), r), 1.0f);
  return DMul(y, spec::Pow2i(static_cast<int>(n)));
}

// GELU(a) as defined above, for any fp32 input (NaN and infinities included).
KVSTASH_HD inline float Gelu(float a) {
  using spec::DAdd, spec::DDiv, spec::DMul;
  constexpr float kTwoSqrtTwoOverPi = 1.5957691216057308f;
  constexpr float kCubic = 0.044715f;
  constexpr float kExpClamp = 80.0f;
  a = a > kGeluClamp ? kGeluClamp : a;
  a = a >= -kGeluClamp ? a : -kGeluClamp;
  float v = DMul(kTwoSqrtTwoOverPi, DAdd(a, DMul(kCubic, DMul(DMul(a, a), a))));
  v = v > kExpClamp ? kExpClamp : (v < -kExpClamp ? -kExpClamp : v);
  const float s = DDiv(1.0f, DAdd(1.0f, GeluExp(-v)));
  return DMul(a, s);
}

// values[i] = Gelu(values[i]).
void GeluInPlace(std::span<float> values);

}  // namespace kvstash::dckv
