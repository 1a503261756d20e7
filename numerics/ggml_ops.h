// The pieces of ggml's CPU arithmetic that the "ggml-q4_1" spec predictor variant
// reproduces (model/predictor/spec_predictor.h): llama.cpp's CPU backend multiplies a
// Q4_1 weight row by an activation row quantised to Q8_1, with integer block sums.
//
// READ ME FIRST
// - QuantizeRowQ8_1 follows the AVX2 path of ggml-cpu's quantize_row_q8_1 (the one
//   x86 builds of llama.cpp run), not the portable quantize_row_q8_1_ref; they differ:
//     amax = max |x| over the block of 32; d = amax / 127 (fp32), stored as fp16;
//     id = amax != 0 ? 127 / amax : 0 (fp32, NOT 1 / d);
//     q[j] = round-half-to-even(x[j] * id)  (the reference uses roundf, half away);
//     s = fp16(d * sum_j q[j])  with the fp32 d, not the fp16-rounded one.
// - DotQ4_1Q8_1: per block b, sumi_b = sum_j q4[j] * q8[j] is exact (int32); the float
//   part runs in a FIXED order of our own (ggml's AVX2 kernel keeps 8 fused
//   multiply-add lanes; we do not bit-match its summation, only its quantisation):
//     acc = 0, summs = 0; for b in increasing order:
//       acc = acc + (d4_b * d8_b) * float(sumi_b);  summs = summs + m4_b * s8_b
//     result = acc + summs
//   with every product and sum a single fp32 rounding (the build has
//   -ffp-contract=off), so the bits are the same on every CPU.
// - A Q4_1 block (20 bytes per 32 weights): f16 d, f16 m, u8 qs[16];
//   w[j] = d * (qs[j] & 15) + m, w[j + 16] = d * (qs[j] >> 4) + m (ggml-common.h).
//   UnpackQ4_1 spreads the nibbles to bytes in that element order, once per model.
//
// Thread-safety: pure functions over caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvstash/result.h"

namespace kvstash::model::ggml {

constexpr uint32_t kBlock = 32;      // elements of a Q4_1 / Q8_1 block
constexpr uint32_t kQ4_1Bytes = 20;  // stored bytes of one Q4_1 block

// One Q8_1 block as quantize_row_q8_1 writes it (d and s as fp16 bits).
struct BlockQ8_1 {
  uint16_t d = 0, s = 0;
  int8_t qs[kBlock] = {};
};

// One Q4_1 block with its nibbles spread to bytes (q[j] in 0..15, element order) and
// d, m converted from fp16 to fp32 (exact).
struct UnpackedQ4_1 {
  float d = 0, m = 0;
  uint8_t q[kBlock] = {};
};

// Quantises x[0, n) into n / 32 blocks at out. REQUIRES: n % 32 == 0.
void QuantizeRowQ8_1(const float* x, uint32_t n, BlockQ8_1* out);

// Unpacks `stored` (whole Q4_1 blocks as the GGUF file holds them) into out.
// InvalidArgument unless stored.size() == 20 * out.size().
Status UnpackQ4_1(std::span<const uint8_t> stored, std::span<UnpackedQ4_1> out);

// The dot product of `blocks` Q4_1 weight blocks with as many Q8_1 activation blocks,
// in the order above.
float DotQ4_1Q8_1(const UnpackedQ4_1* w, const BlockQ8_1* x, uint32_t blocks);

// ggml's rms_norm then mul by the norm weight, in place on row[0, n):
// sum = sum over increasing i of double(row[i] * row[i]) (the product in fp32, the sum
// in double as ggml_float); mean = float(sum / n); scale = 1 / sqrt(mean + eps) (fp32,
// IEEE sqrt and division); row[i] = (row[i] * scale) * w[i].
void RmsNormRow(float* row, uint32_t n, const float* w, float eps);

}  // namespace kvstash::model::ggml
