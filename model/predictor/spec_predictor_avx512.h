// AVX-512 forms of the spec predictor's attention tile and SiLU (the AVX2 forms are in
// model/predictor/spec_predictor_avx2.h), bit-identical to the scalar reference
// (numerics/spec_predictor_ops.h, numerics/det_math.h): the same correctly
// rounded single operations (separate multiply and add, never FMA: the project builds
// with -ffp-contract=off, and only this file's .cc gets the AVX-512 flags) on the same
// operands in the same order, lane-wise.
//
// - DetExp / SiluMul: lane l computes exactly spec::DetExp / spec::DetSilu, as the AVX2
//   form does on 8 lanes (the same floor, Cody-Waite reduction, degree-7 Horner
//   polynomial, two exact 2^n steps, then the NaN / overflow / underflow cases, with
//   mask registers instead of blends).
// - Scores: two query rows per zmm, not two keys. Lanes 0-7 hold row r's and lanes 8-15
//   row r+1's canonical partial sums s_0..s_7 of CanonicalDot for the same key: the
//   key's 8 values are broadcast to both halves (vbroadcastf32x8 from memory) and the
//   rows' q chunks sit in the halves, so each half runs exactly the AVX2 form's sequence
//   s_l = s_l + q[d] * k[d], d = l, l+8, ... in increasing d. The final tree
//   ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) is done for 8 keys x 2 rows with in-lane
//   shuffles (even lanes + odd lanes, twice, the same operand order as vhaddps) and one
//   128-bit-group add, then scaled by 1/sqrt(hd) as the AVX2 form does.
// - Softmax: the max (order-free, as the AVX2 form argues), e_j = DetExp(s_j - max)
//   lane-wise, each row's sum strictly in increasing key order (one scalar chain per
//   row; 8 rows' chains interleaved over the keys they all see, then each row's own
//   remaining keys), p_j = e_j / sum (IEEE division per lane).
// - Weighted sum: out[d] = out[d] + p_j * v_j[d] over increasing j, 16 lanes of d per
//   zmm, two rows at a time (each row's own accumulators, its own increasing j order;
//   rows only share the loads of v_j).
// NaN payloads: as in the AVX2 forms (the first operand's payload wins in the scalar
// and vector forms alike, and operands are in the same order).
//
// Callers must check spec::CpuHasAvx512() first. Thread-safety: pure functions over
// caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash::model::avx512 {

// gate[i] = DMul(DetSilu(gate[i]), up[i]) for i in [0, n).
void SiluMul(float* gate, const float* up, size_t n);

// y[i] = DetExp(x[i]) for i in [0, n) (x == y allowed).
void DetExp(const float* x, float* y, size_t n);

// The int8-attention variant's softmax numerator (spec_predictor_int_attention.cc):
// m = max of s[0..n), s[j] = DetExp(s[j] - m) in place, returns Sum16 of them (16 lane
// sums over j = l, l + 16, ... in increasing j, then the fixed tree) and sets
// w[j] = s[j] * v_scale[j]. The same bits as the portable loops there.
float ExpSumWeights(float* s, uint32_t n, const float* v_scale, float* w);

// As avx2::AttentionTile (model/predictor/spec_predictor_avx2.h): the same arguments,
// scratch size and output bits.
void AttentionTile(const float* q, size_t q_token_stride, uint32_t tokens, uint32_t heads,
                   const float* k, const float* v, size_t stride, uint32_t n0, uint32_t hd,
                   float scale, float* scratch, float* out, size_t out_token_stride);

}  // namespace kvstash::model::avx512
