// AVX2 forms of the spec predictor's fp32 steps (numerics/spec_predictor_ops.h,
// numerics/det_math.h), bit-identical to them: the same correctly rounded single
// operations (separate multiply and add, never FMA; the functions are compiled for
// AVX2 only, with -ffp-contract=off) on the same operands in the same order, lane-wise.
//
// - DetExp / DetSilu: lane l computes exactly spec::DetExp / spec::DetSilu (the floor,
//   the Cody-Waite reduction, the degree-7 Horner polynomial, the two exact 2^n steps,
//   then the NaN / overflow / underflow cases).
// - CanonicalDot: lane l of the accumulator is the canonical partial sum s_l; the final
//   ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) tree is done for 8 keys at once with two
//   levels of vhaddps and one 128-bit half add, which is exactly that tree per key.
// - AttentionTile: model::AttentionRow for a tile of query rows sharing one kv head:
//   scores for 8 keys at a time, the max, DetExp, each softmax sum strictly in
//   increasing key order (several rows' sums interleaved), the IEEE division per key,
//   and out[d] accumulated over increasing keys.
// NaN payloads: when two NaN operands meet, x86 returns the first operand's payload in
// the scalar and the vector forms alike; the predictor maps every NaN activation to 0
// when it quantises, so payloads never reach a projection.
//
// Callers must check spec::CpuHasAvx2() first. Thread-safety: pure functions over
// caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash::model::avx2 {

// gate[i] = DMul(DetSilu(gate[i]), up[i]) for i in [0, n).
void SiluMul(float* gate, const float* up, size_t n);

// y[i] = DetExp(x[i]) for i in [0, n) (x == y allowed).
void DetExp(const float* x, float* y, size_t n);

// CanonicalDotInline(a, b, n).
float CanonicalDot(const float* a, const float* b, uint32_t n);

// AttentionRow (numerics/spec_predictor_ops.h) for a tile of query rows that share one kv
// head: `tokens` consecutive tokens x `heads` query heads. Row (t, h) reads q + t *
// q_token_stride + h * hd, sees keys 0..n0+t-1 (rows k/v + j * stride), and writes
// out + t * out_token_stride + h * hd. Keys and values are visited in blocks that all
// rows of the tile use while the block is in L1. scratch holds tokens * heads *
// (n0 + tokens + 7) floats.
void AttentionTile(const float* q, size_t q_token_stride, uint32_t tokens, uint32_t heads,
                   const float* k, const float* v, size_t stride, uint32_t n0, uint32_t hd,
                   float scale, float* scratch, float* out, size_t out_token_stride);

}  // namespace kvstash::model::avx2
