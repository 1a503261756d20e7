// The per-row fp32 steps of the spec predictor (model/predictor/spec_predictor.h), shared by the
// CPU predictor (spec_predictor.cc) and the CUDA kernels
// (gpu_kernels/spec_predictor_kernels.cuh) so both run one definition and produce the
// same bits (docs/architecture.md §3): every fp32 operation is a single correctly rounded DAdd /
// DSub / DMul / DDiv (numerics/det_math.h: __fadd_rn etc. on device, no contraction
// on the host), sums run in the fixed orders documented per function, and exp/rsqrt
// are det_math's DetExp/DetRsqrt.
//
// Thread-safety: pure functions over caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/dtype_bits.h"
#include "numerics/det_math.h"

namespace kvstash::model {

// Canonical fp32 dot product: 8 strided partial sums (lane l sums i = l, l+8, ... in
// increasing i), then ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)).
KVSTASH_HD inline float CanonicalDotInline(const float* a, const float* b, uint32_t n) {
  using spec::DAdd;
  using spec::DMul;
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t i = 0; i < n; ++i) s[i & 7] = DAdd(s[i & 7], DMul(a[i], b[i]));
  return DAdd(DAdd(DAdd(s[0], s[1]), DAdd(s[2], s[3])), DAdd(DAdd(s[4], s[5]), DAdd(s[6], s[7])));
}

// In place RMSNorm of one row of n values with weights w[n]:
// row[i] = w[i] * (row[i] * rsqrt(dot(row, row) / n + eps)).
KVSTASH_HD inline void RmsNormRow(float* row, uint32_t n, const float* w, float eps) {
  using spec::DAdd;
  using spec::DMul;
  const float ms = spec::DDiv(CanonicalDotInline(row, row, n), static_cast<float>(n));
  const float inv = spec::DetRsqrt(DAdd(ms, eps));
  for (uint32_t i = 0; i < n; ++i) row[i] = DMul(w[i], DMul(row[i], inv));
}

// In place rotary embedding of one head vector r[2 * half] (rotate-half layout):
// (a, b) = (r[i], r[i + half]) -> (a*cos - b*sin, b*cos + a*sin) with cs/sn [half].
KVSTASH_HD inline void RopeRow(float* r, const float* cs, const float* sn, uint32_t half) {
  using spec::DMul;
  for (uint32_t i = 0; i < half; ++i) {
    const float a = r[i], b = r[i + half];
    r[i] = spec::DSub(DMul(a, cs[i]), DMul(b, sn[i]));
    r[i + half] = spec::DAdd(DMul(b, cs[i]), DMul(a, sn[i]));
  }
}

// The fixed tree over 16 lane sums: ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), the same for
// l8..l15, then the two halves (the int8-attention variant's softmax sum).
KVSTASH_HD inline float Tree16(const float* l) {
  using spec::DAdd;
  const float a = DAdd(DAdd(DAdd(l[0], l[1]), DAdd(l[2], l[3])), DAdd(DAdd(l[4], l[5]), DAdd(l[6], l[7])));
  const float b =
      DAdd(DAdd(DAdd(l[8], l[9]), DAdd(l[10], l[11])), DAdd(DAdd(l[12], l[13]), DAdd(l[14], l[15])));
  return DAdd(a, b);
}

// Causal attention of one query head over keys 0..n-1: q [hd]; k, v the cache rows of
// its kv head, row j at k + j * stride (stride = n_kv_heads * hd); scale =
// DetRsqrt(hd). Scores s[j] = dot(q, k_j) * scale (CanonicalDotInline); softmax with
// DetExp(s - max) and a sequential sum in increasing j; out[d] = sum over increasing j
// of (e_j / sum) * v_j[d]. scratch holds n floats.
KVSTASH_HD inline void AttentionRow(const float* q, const float* k, const float* v, size_t stride, uint32_t n,
                                    uint32_t hd, float scale, float* scratch, float* out) {
  using spec::DAdd;
  using spec::DMul;
  float m = -3.40282347e38f;
  for (uint32_t j = 0; j < n; ++j) {
    scratch[j] = DMul(CanonicalDotInline(q, k + j * stride, hd), scale);
    m = scratch[j] > m ? scratch[j] : m;
  }
  float sum = 0.0f;
  for (uint32_t j = 0; j < n; ++j) {
    scratch[j] = spec::DetExp(spec::DSub(scratch[j], m));
    sum = DAdd(sum, scratch[j]);
  }
  for (uint32_t d = 0; d < hd; ++d) out[d] = 0.0f;
  for (uint32_t j = 0; j < n; ++j) {
    const float p = spec::DDiv(scratch[j], sum);
    const float* vv = v + j * stride;
    for (uint32_t d = 0; d < hd; ++d) out[d] = DAdd(out[d], DMul(p, vv[d]));
  }
}

}  // namespace kvstash::model
