// The per-(row, group) body of the spec predictor's symmetric quantiser
// (numerics/quantize.h has the contract), shared by the CPU (quantize.cc) and the GPU
// (gpu_kernels/spec_predictor_kernels.cuh) so both run one definition: amax over finite
// values, scale = amax / Q (1 when amax is 0), q = clamp(rne(x / scale), -Q, Q),
// NaN -> 0. Every step is exact or a single correctly rounded fp32 operation
// (det_math.h), so host and device give the same bits.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>

#include "kvstash/dtype_bits.h"
#include "numerics/det_math.h"

namespace kvstash::spec {

// Round half to even of x for |x| < 2^22: adding and subtracting 1.5 * 2^23 leaves x
// rounded to an integer by round-to-nearest-even (exact; +- only).
KVSTASH_HD inline float RoundHalfEvenInline(float x) {
  constexpr float kMagic = 12582912.0f;
  return DSub(DAdd(x, kMagic), kMagic);
}

// Quantises x[0..len) with qmax = 127 (int8) or 32767 (int16) into q[0..len); returns
// the group's scale.
template <typename Q>
KVSTASH_HD inline float QuantizeGroup(const float* x, size_t len, float qmax, Q* q) {
  constexpr float kMaxFinite = 3.40282347e38f;
  float amax = 0.0f;
  for (size_t i = 0; i < len; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    if (a > amax && a <= kMaxFinite) amax = a;  // NaN and Inf never win
  }
  const float scale = amax > 0.0f ? DDiv(amax, qmax) : 1.0f;
  for (size_t i = 0; i < len; ++i) {
    const float v = x[i];
    Q r = 0;
    if (v == v) {  // not NaN
      float t = DDiv(v, scale);
      t = t > qmax ? qmax : (t < -qmax ? -qmax : t);
      r = static_cast<Q>(RoundHalfEvenInline(t));
    }
    q[i] = r;
  }
  return scale;
}

}  // namespace kvstash::spec
