// AVX2 forms of the spec predictor's fp32 steps (model/spec_predictor_ops.h,
// codec/spec/det_math.h), bit-identical to them: the same correctly rounded single
// operations (separate multiply and add, never FMA; the functions are compiled for
// AVX2 only, with -ffp-contract=off) on the same operands in the same order, lane-wise.
//
// - DetExp / DetSilu: lane l computes exactly spec::DetExp / spec::DetSilu (the floor,
//   the Cody-Waite reduction, the degree-7 Horner polynomial, the two exact 2^n steps,
//   then the NaN / overflow / underflow cases).
// - CanonicalDot: lane l of the accumulator is the canonical partial sum s_l; the final
//   ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) tree is done for 8 keys at once with two
//   levels of vhaddps and one 128-bit half add, which is exactly that tree per key.
// - AttentionHeads: model::AttentionRow for the query heads that share one kv head:
//   scores for 8 keys at a time, the max, DetExp, the softmax sum strictly in
//   increasing key order (the heads' sums interleaved, each still sequential), the
//   IEEE division per key, and out[d] accumulated over increasing keys.
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

// For r in [0, heads): AttentionRow(q + r * hd, k, v, stride, n, hd, scale, ., out + r * hd)
// (model/spec_predictor_ops.h), the heads sharing the kv head whose rows are k/v +
// j * stride. scratch holds heads * (n + 8) floats.
void AttentionHeads(const float* q, uint32_t heads, const float* k, const float* v, size_t stride,
                    uint32_t n, uint32_t hd, float scale, float* scratch, float* out);

}  // namespace kvstash::model::avx2
