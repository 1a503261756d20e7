// The spec predictor's fast grouped GEMM: weights packed once, activations quantised
// straight into the kernel's layout, an AVX2 register-blocked kernel over several
// tokens (docs/architecture.md §3). Same output bits as Int16x8GemmGroupedNT / Int8GemmGroupedNT
// (numerics/int8_gemm.h) with QuantizeRowsInt16 / QuantizeRowsInt8
// (numerics/quantize.h) on the same inputs.
//
//   out[m][n] = sum over groups g ascending of
//               float(dot_g(A[m], B[n])) * (a_scale[m][g] * b_scale[n][g])
//
// READ ME FIRST
// - Exactness: the per-group int32 dot products are exact in any order (int8 weights
//   and int16 activations: |dot| <= 32767 * 127 * 512 < 2^31), so the kernel may sum
//   them in any blocking. Every fp32 step is the reference's, per output element, in
//   the same order: s = a_scale * b_scale, o = 0, then o = o + float(dot_g) * s for
//   g = 0, 1, ... (separate multiply and add, no FMA; this file's AVX2 code is built
//   without -mfma and with -ffp-contract=off).
// - Weight layout (PackedWeights): output channels in blocks of 16, and within a block,
//   per group, per pair of input channels (k, k+1): 16 channels x 2 int8 = 32 bytes,
//   channels 0-7 then 8-15, each as (w[k], w[k+1]). A group of odd length is padded
//   with a zero weight; channels past n are zero. The AVX2 kernel widens 16 bytes to
//   int16 and multiplies them with a broadcast activation pair (vpmaddwd), giving 8
//   output channels' partial sums per instruction without horizontal reductions. The
//   AVX-512 kernel widens all 32 bytes to one zmm and uses vpdpwssd (16 channels per
//   instruction; int8_gemm_packed_avx512.cc states its exactness argument).
// - AMX tile layout (int8_gemm_packed_amx.cc), only where every group's length is a
//   multiple of 64 (AmxShape; e.g. k 576 or 1536 with group 128) and the CPU has AMX
//   (CpuHasAmx): PackedWeights::amx holds per block, per quad of input channels
//   (k..k+3), 16 channels x 4 int8 (64 bytes: one row of a B tile), and
//   PackedActivations::amx_hi / amx_lo each activation a = 256 * hi + lo as int8 rows
//   [m rounded up to 16][k] (hi = a >> 8 signed, lo = a & 255 unsigned; padding rows 0).
// - Activation layout (PackedActivations): int16 rows of `stride` = 2 * pairs values,
//   each group starting at an even offset and padded with a zero when its length is
//   odd. With an even group size and even K the layout is plain row-major [m, K].
//   W8A8 activations (int8 range) are stored as int16 too.
// - Threads: output-channel blocks are split over `threads` std::threads; each output
//   element is computed by exactly one thread in the same order, so the bits do not
//   depend on the thread count.
//
// Thread-safety: PackedWeights is immutable after PackWeights; the functions are
// reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/status.h"
#include "numerics/int8_gemm.h"

namespace kvstash::spec {

// Output channels per packed block (two AVX2 vectors of 8 int32 / fp32 lanes).
inline constexpr int kPackedBlock = 16;

// Activation-side geometry shared by both operands of one product.
struct PackedShape {
  int k = 0;            // input channels
  int group = 0;        // channels per group, <= k (the last group may be shorter)
  int groups = 0;       // ceil(k / group)
  int group_pairs = 0;  // channel pairs per full group = ceil(group / 2)
  int pairs = 0;        // channel pairs per row, over all groups (last group's own length)

  // Pairs of group g: group_pairs, or fewer for the last group.
  int PairsOf(int g) const;
  // int16 values per packed activation row.
  int stride() const { return 2 * pairs; }
  // REQUIRES k >= 1, group >= 1 (InvalidArgument otherwise); a group above k becomes
  // k (one group per row, as QuantizeRowsInt8/16 treat it).
  static Status Make(int k, int group, PackedShape* out);
  // True when every group's length is a multiple of 64 (the AMX kernel's K step).
  bool AmxShape() const;
};

// One projection's int8 weights [n, k] with per-(output channel, group) scales.
struct PackedWeights {
  PackedShape shape;
  int n = 0;                  // output channels
  int blocks = 0;             // ceil(n / 16)
  std::vector<int8_t> data;   // [blocks][pairs][2][8][2] as described above
  std::vector<float> scales;  // [groups][blocks * 16], 0 for padding channels
  std::vector<int8_t> amx;    // [blocks][k / 4][16][4] when AmxShape() and CpuHasAmx(), else empty
};

// Packs b [n, k] int8 (row per output channel) and b_scale [n, groups]. group = 0
// means one group per row (group = k). Also fills `amx` when the shape and the CPU
// allow the AMX kernel (CpuHasAmx: one more byte per weight). Errors: InvalidArgument
// on sizes.
Status PackWeights(std::span<const int8_t> b, std::span<const float> b_scale, int n, int k, int group,
                   PackedWeights* out);

// Activations quantised per (token, group) in the packed row layout.
struct PackedActivations {
  PackedShape shape;
  int m = 0;
  int bits = 16;              // 16: int16 range; 8: values within int8's range
  std::vector<int16_t> q;     // [m, shape.stride()]
  std::vector<float> scales;  // [m, groups]
  // AMX operands (see the top) when the backend runs AMX and AmxShape(), else empty.
  std::vector<int8_t> amx_hi, amx_lo;  // [ceil(m / 16) * 16, k]
};

// Quantises x [m, k] fp32 per (row, group) exactly as QuantizeRowsInt16 (bits = 16)
// or QuantizeRowsInt8 (bits = 8) would, into the packed layout of `shape`.
// backend kScalar uses the portable QuantizeGroup; other backends the AVX2 form when
// the CPU has it (same bits). With a backend that runs AMX (UseAmx) and AmxShape() it
// also fills amx_hi / amx_lo. Errors: InvalidArgument on sizes or bits not 8/16.
Status QuantizeActivations(std::span<const float> x, int m, const PackedShape& shape, int bits,
                           GemmBackend backend, int threads, PackedActivations* out);

// out [m, n] = A * B^T as documented at the top. REQUIRES a.shape == b.shape (k and
// group); 16-bit activations need group <= kMaxInt16Group, 8-bit ones k <= 2^17 (so
// the int32 sums cannot overflow). kScalar runs a portable loop over the
// packed layout; kAvx2 the AVX2 blocked kernel; kAvx512 the AVX-512 VNNI kernel
// (int8_gemm_packed_avx512.cc); kAmx the AMX tile kernel (int8_gemm_packed_amx.cc) when
// both operands carry the AMX layout, else the VNNI kernel; kAuto the widest of these
// the CPU has (CpuHasAmx, CpuHasAvx512, CpuHasAvx2). Errors: InvalidArgument on
// mismatched shapes or sizes, NotSupported for a backend the CPU lacks.
Status GemmPacked(const PackedActivations& a, const PackedWeights& b, std::span<float> out,
                  GemmBackend backend, int threads);

namespace internal {
// AVX2 kernels (int8_gemm_packed_avx2.cc); entered only after a CPU check.
void GemmPackedAvx2(const PackedActivations& a, const PackedWeights& b, float* out, int block_begin,
                    int block_end);
// AVX-512 VNNI kernel (int8_gemm_packed_avx512.cc); entered only after
// CpuHasAvx512().
void GemmPackedAvx512(const PackedActivations& a, const PackedWeights& b, float* out, int block_begin,
                      int block_end);
// Sizes a->amx_hi / amx_lo to [ceil(m / 16) * 16, k] with the padding rows 0.
void SizeForAmx(PackedActivations* a);
// hi[c] = q[c] >> 8, lo[c] = q[c] & 255 (as its byte) for c < k: a = 256 * hi + lo
// exactly (int8_gemm_packed_amx.cc, AVX-512BW; only after CpuHasAmx()).
void SplitRowForAmx(const int16_t* q, int k, int8_t* hi, int8_t* lo);
// SizeForAmx, then SplitRowForAmx on every row of a->q (REQUIRES a->shape.AmxShape() and
// CpuHasAmx()); QuantizeActivations does the same per row when the backend runs AMX.
void SplitForAmx(PackedActivations* a);
// AMX tile kernel (int8_gemm_packed_amx.cc); entered only after CpuHasAmx() with
// b.amx and a.amx_hi / amx_lo filled.
void GemmPackedAmx(const PackedActivations& a, const PackedWeights& b, float* out, int block_begin,
                   int block_end);
// As QuantizeGroup (same values, stored as int16) when the group's scale is nonzero:
// returns false without writing when amax / qmax underflows to 0 (the caller then
// runs the reference quantiser, whose NaN handling for that case it keeps).
bool QuantizeGroupAvx2(const float* x, int len, float qmax, int16_t* q, float* scale);
}  // namespace internal

}  // namespace kvstash::spec
