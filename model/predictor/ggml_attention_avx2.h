// AVX2 (with F16C) forms of the ggml-q4_1 predictor's attention steps
// (SpecPredictor::GgmlAttention, model/predictor/spec_predictor_ggml.cc), bit-identical
// to its scalar code: the same correctly rounded single operations (separate multiply
// and add, never FMA; compiled with -mavx2 -mf16c only and -ffp-contract=off) on the
// same operands in the same order, one independent value per lane.
//
// - RoundToDType: y = x rounded to f16 or bf16 and back (F32ToF16 / F32ToBf16, then
//   F16ToF32 / Bf16ToF32 of kvstash/dtype_bits.h). f16 by vcvtps2ph with round to
//   nearest even, which is IEEE's conversion as F32ToF16 is (subnormals, overflow to
//   Inf, and NaN: sign | 0x7E00 | the top 10 payload bits, as F32ToF16 writes), and
//   vcvtph2ps back (exact); bf16 by the same integer steps as F32ToBf16 (add 0x7FFF
//   plus the kept LSB, NaN: keep the top bits and set the quiet bit), lane by lane.
// - AttentionRow: one (token, head) row of GgmlAttention over keys 0..n-1 whose K, V
//   rows are already rounded: q rounded to the dtype; s_j = CanonicalDot(q, k_j) *
//   scale (model/predictor/spec_predictor_avx2.h's CanonicalDot, the canonical order);
//   the max; e_j = DetExp(s_j - max) (8 lanes of spec::DetExp); the softmax sum in
//   double strictly in increasing j (scalar); p_j = round(e_j * float(1 / sum)) (8
//   keys per vector); out[d] = out[d] + p_j * v_j[d] over increasing j with the lanes
//   across d. REQUIRES hd % 8 == 0.
//
// Callers must check spec::CpuHasAvx2() first (every AVX2 CPU has F16C).
// Thread-safety: pure functions over caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/dtype.h"

namespace kvstash::model::ggml::avx2 {

// y[i] = x[i] rounded to dt (kF16 or kBF16) and back, for i in [0, n) (x == y allowed).
void RoundToDType(const float* x, float* y, size_t n, DType dt);

// The row described above: q [hd] (not yet rounded), keys k + j * stride and values
// v + j * stride for j in [0, n), both already rounded to dt; out [hd]. scratch holds
// hd + n floats.
void AttentionRow(const float* q, const float* k, const float* v, size_t stride, uint32_t n, uint32_t hd,
                  float scale, DType dt, float* scratch, float* out);

}  // namespace kvstash::model::ggml::avx2
