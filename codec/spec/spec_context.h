// Per-scalar coding contexts of the spec codec: which frequency table codes each
// scalar, and the prediction its residual is taken against. Encoder and decoder both
// call ComputeContexts on their own predictor output, so every operation here is
// deterministic (docs/architecture.md §3): integer bit manipulation, exact scaling by powers of
// two, and single correctly rounded fp32 operations in a fixed order.
//
// The model (docs/format/spec.md has the derivation):
//   bf16:  p = bf16(mu); residual symbol d = ordinal(true) - ordinal(p) (mod 2^16).
//          In units of p's ulp, the calibrated spread is s = log2(sigma_c) - ulp_log2(p)
//          (sigma_c: residual std of channel c of this (layer, K/V, head)), and mu lies
//          f = (mu - p) / ulp(p) in [-1/2, 1/2] ulps above p.
//   f16:   the same with p = f16(mu) and f16's ordinals and ulps (codec/spec/ordinal.h).
//   fp8:   the same in the scaled domain x = mu / scale (one fp32 scale per
//          (layer, K/V)), 8-bit ordinals, sigma_c / scale.
//   table = bucket(s) * frac_bins + bin(f), bucket(s) = clamp(floor((s - s_min) /
//   step), 0, buckets - 1), bin(f) = clamp(floor((f + 1/2) * frac_bins), 0, frac_bins - 1).
// Every bit pattern of the true value is codable: symbols are residuals mod 2^w.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "codec/spec/spec_context_scalar.h"  // ApproxLog2, the per-scalar body
#include "kvstash/dtype.h"
#include "kvstash/result.h"

namespace kvstash::spec {

// Bucketing of the spread and the sub-ulp offset. Stored in the artifact.
struct ContextConfig {
  DType dtype = DType::kBF16;  // bf16, f16 or fp8_e4m3
  float s_min = -3.0f;         // log2(sigma / ulp) of bucket 0's lower edge
  float step = 0.25f;          // bucket width in octaves
  uint32_t buckets = 64;
  uint32_t frac_bins = 4;

  uint32_t num_tables() const { return buckets * frac_bins; }
  // Symbol width: 16 (bf16, f16) or 8 (fp8).
  int symbol_bits() const { return dtype == DType::kFP8E4M3 ? 8 : 16; }
  // InvalidArgument for another dtype, 0 buckets/bins, a non-positive step, more than
  // 65536 tables.
  Status Validate() const;
  // Centre of bucket b in log2(ulps) and of frac bin j in ulps (calibration uses them
  // for the parametric components).
  double BucketCentre(uint32_t b) const { return s_min + (b + 0.5) * step; }
  double FracCentre(uint32_t j) const { return (j + 0.5) / frac_bins - 0.5; }
};

// Contexts of one (layer, K/V) tensor (ScalarContext per element; the GPU decoder,
// gpu_kernels/spec_decode.h, runs the same function) of T tokens: mu [T, H, D] predicted fp32,
// log2_sigma [H, D] (artifact), fp8_scale (fp8 only; ignored for bf16).
// Outputs per scalar: the prediction's ordinal (pred_ordinal, u16 for both dtypes)
// and the table index. REQUIRES: spans of equal length T*H*D (log2_sigma H*D);
// InvalidArgument otherwise or for a non-positive / non-finite fp8 scale. Every dtype
// runs on AVX-512 or AVX2 where spec::CpuHasAvx512() / CpuHasAvx2() allow
// (spec_context_simd.h; the same bits as the scalar body), else on the scalar body.
Status ComputeContexts(const ContextConfig& cfg, std::span<const float> mu,
                       std::span<const float> log2_sigma, float fp8_scale,
                       std::span<uint16_t> pred_ordinal, std::span<uint16_t> table);

// Residual symbol of a true value (bits as u16: bf16 pattern, or fp8 byte) against a
// prediction ordinal, and its inverse.
uint16_t ResidualSymbol(DType dtype, uint16_t true_bits, uint16_t pred_ordinal);
uint16_t ValueFromResidual(DType dtype, uint16_t symbol, uint16_t pred_ordinal);

}  // namespace kvstash::spec
