// The per-scalar body of the spec codec's context computation, shared by the CPU
// (codec/spec/spec_context.cc ComputeContexts) and the GPU (gpu_kernels/spec_decode.cuh)
// so there is exactly one definition of the maths (docs/format/spec.md, "Contexts").
//
// READ ME FIRST
// - Everything here is KVSTASH_HD inline: plain C++ on the host, __host__ __device__
//   under nvcc. The fp32 operations go through det_math.h's DAdd/DSub/DMul/DDiv, which
//   are single correctly rounded operations on both sides (__fadd_rn etc. on device;
//   the host build uses -ffp-contract=off), and the rest is integer bit manipulation,
//   so host and device produce identical bits for every input, NaN/Inf/subnormal
//   predictions included. NaN payloads and signs are the one place where CPU and GPU
//   arithmetic differ (CUDA returns a canonical NaN), so no NaN ever goes through an
//   operation whose result bits are used.
// - SpecContextParams holds the per-tensor constants; build it once on the host with
//   MakeSpecContextParams (it performs the only two per-tensor fp32 operations:
//   ApproxLog2(scale) and 1 / step) and pass it by value to a kernel.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "codec/spec/ordinal.h"
#include "kvstash/dtype_bits.h"
#include "numerics/det_math.h"

namespace kvstash::spec {

// A cheap deterministic log2 for positive normal floats: exponent + mantissa / 2^23
// (exact at powers of two, monotone, within 0.086 of log2).
KVSTASH_HD inline float ApproxLog2(float x) {
  const uint32_t b = Bits(x);
  const int e = static_cast<int>((b >> 23) & 0xFF) - 127;
  const float m = DMul(static_cast<float>(b & 0x7FFFFFu), 1.1920928955078125e-7f);  // 2^-23
  return DAdd(static_cast<float>(e), m);
}

// Per-tensor constants of the context computation (a trivially copyable POD).
struct SpecContextParams {
  bool fp8 = false;         // fp8 e4m3 target (else bf16, or f16 when f16 is set)
  bool f16 = false;         // IEEE f16 target (llama.cpp's default KV type); not with fp8
  float fp8_scale = 1.0f;   // per-(layer, K/V) scale; fp8 only
  float log2_scale = 0.0f;  // ApproxLog2(fp8_scale); 0 for bf16
  float s_min = 0.0f;       // ContextConfig::s_min
  float inv_step = 0.0f;    // DDiv(1, ContextConfig::step)
  float frac_bins_f = 0.0f; // float(frac_bins)
  uint32_t buckets = 0;
  uint32_t frac_bins = 0;
};

// REQUIRES (checked by the callers): for fp8, fp8_scale finite and > 0; step > 0.
KVSTASH_HD inline SpecContextParams MakeSpecContextParams(bool fp8, float fp8_scale, float s_min,
                                                          float step, uint32_t buckets,
                                                          uint32_t frac_bins) {
  SpecContextParams p;
  p.fp8 = fp8;
  p.fp8_scale = fp8 ? fp8_scale : 1.0f;
  p.log2_scale = fp8 ? ApproxLog2(fp8_scale) : 0.0f;
  p.s_min = s_min;
  p.inv_step = DDiv(1.0f, step);
  p.frac_bins_f = static_cast<float>(frac_bins);
  p.buckets = buckets;
  p.frac_bins = frac_bins;
  return p;
}

KVSTASH_HD inline uint32_t ClampIndex(int v, uint32_t n) {
  return v < 0 ? 0u : (static_cast<uint32_t>(v) >= n ? n - 1 : static_cast<uint32_t>(v));
}

// 2^-u for an ulp exponent u, or 0 when out of the exact range (f is then unused).
KVSTASH_HD inline float InvUlp(int u) { return (u >= -126 && u <= 126) ? Pow2i(-u) : 0.0f; }

// Context of one scalar: prediction mu (fp32) and the calibrated log2 sigma of its
// channel. Writes the prediction's ordinal (u16 for both dtypes) and the table index.
KVSTASH_HD inline void ScalarContext(const SpecContextParams& p, float mu, float log2_sigma,
                                     uint16_t* pred_ordinal, uint16_t* table) {
  float m = mu;
  int u;
  float pv;
  if (p.fp8) {
    // A NaN prediction stays as it is: a NaN operand's sign survives an x86 division
    // but CUDA's __fdiv_rn returns the canonical +NaN, and the fp8 NaN byte keeps the
    // sign. (Same bits as dividing on the CPU; the scale is finite and > 0, so no NaN
    // arises from a non-NaN prediction.)
    if (m == m) m = DDiv(m, p.fp8_scale);
    const uint8_t q = F32ToFp8E4M3(m);
    *pred_ordinal = Fp8Ordinal(q);
    u = Fp8UlpLog2(q);
    pv = Fp8E4M3ToF32(q);
  } else if (p.f16) {
    const uint16_t q = F32ToF16(m);
    *pred_ordinal = F16Ordinal(q);
    u = F16UlpLog2(q);
    pv = F16ToF32(q);
  } else {
    const uint16_t q = F32ToBf16(m);
    *pred_ordinal = Bf16Ordinal(q);
    u = Bf16UlpLog2(q);
    pv = Bf16ToF32(q);
  }
  const float s = DSub(DSub(log2_sigma, p.log2_scale), static_cast<float>(u));
  const float sb = DMul(DSub(s, p.s_min), p.inv_step);
  const int bucket = (sb == sb) ? FloorToInt(sb < -1.0f ? -1.0f : (sb > 1e6f ? 1e6f : sb)) : 0;
  float f = DMul(DSub(m, pv), InvUlp(u));
  if (!(f == f) || f > 0.5f || f < -0.5f) f = 0.0f;  // NaN/Inf/saturated predictions
  const int bin = FloorToInt(DMul(DAdd(f, 0.5f), p.frac_bins_f));
  *table = static_cast<uint16_t>(ClampIndex(bucket, p.buckets) * p.frac_bins +
                                 ClampIndex(bin, p.frac_bins));
}

// Residual symbol of a true value (bits as u16: bf16 or f16 pattern, or fp8 byte) against a
// prediction ordinal, and its inverse (residuals mod 2^16 or 2^8). f16 and bf16 share
// the 16-bit ordinal map, so these take no f16 flag.
KVSTASH_HD inline uint16_t ResidualSymbolBits(bool fp8, uint16_t true_bits, uint16_t pred_ordinal) {
  if (fp8) {
    return static_cast<uint8_t>(Fp8Ordinal(static_cast<uint8_t>(true_bits)) - pred_ordinal);
  }
  return static_cast<uint16_t>(Bf16Ordinal(true_bits) - pred_ordinal);
}
KVSTASH_HD inline uint16_t ValueFromResidualBits(bool fp8, uint16_t symbol, uint16_t pred_ordinal) {
  if (fp8) return Fp8FromOrdinal(static_cast<uint8_t>(pred_ordinal + symbol));
  return Bf16FromOrdinal(static_cast<uint16_t>(pred_ordinal + symbol));
}

}  // namespace kvstash::spec
