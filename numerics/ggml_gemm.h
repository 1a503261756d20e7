// The ggml-q4_1 predictor's projections with SIMD kernels: Q4_1 weight rows packed once
// in blocks of 16 rows, times activation rows quantised to Q8_1, with the same output
// bits as ggml::DotQ4_1Q8_1 (numerics/ggml_ops.h) for every (token, row).
//
//   y[t * y_stride + o] = DotQ4_1Q8_1(row o of the weights, row t of x, blocks)
//
// READ ME FIRST
// - Exactness: per block b the integer sum sumi_b = sum_j q4[j] * q8[j] is exact in
//   any order (|sumi_b| <= 32 * 15 * 127 < 2^16), so the kernels may form it with any
//   instruction mix. The fp32 part keeps DotQ4_1Q8_1's order per output: acc = acc +
//   (d4_b * d8_b) * float(sumi_b), summs = summs + m4_b * s8_b for b = 0, 1, ..., then
//   acc + summs, each a separate correctly rounded operation (vmulps / vaddps, never
//   FMA; -ffp-contract=off). The kernels vectorise ACROSS outputs (16 weight rows in
//   the lanes, several tokens in separate registers), never across the blocks of one
//   output, so every lane runs exactly the scalar sequence.
// - Packed layout (PackedQ4_1): rows in blocks of kRowBlock = 16 (the last padded with
//   zero rows: q, d and m all 0, computed and never stored); per row block, per Q4_1
//   block b: 512 bytes of nibbles as bytes, [quad k = 0..7][row r = 0..15][4 bytes]
//   holding q_r[4k .. 4k+3] (element order of UnpackedQ4_1), then d[16] and m[16]
//   (fp32). One 64-byte load at quad k is 16 rows x 4 unsigned bytes: the unsigned
//   operand of vpdpbusd (AVX-512 VNNI), or two vpmaddubsw operands of 8 rows (AVX2),
//   against the token's 4 signed Q8_1 bytes broadcast to every lane.
// - Paths: kScalar runs DotQ4_1Q8_1 on the UnpackedQ4_1 rows (the reference; the
//   predictor keeps only the layout its path reads); kAvx2 (ggml_gemm_avx2.cc) and
//   kAvx512 (ggml_gemm_avx512.cc, needs AVX-512 F/BW/VL/VNNI) read PackedQ4_1.
//   ResolveGgmlPath turns a spec::GemmBackend into a path with the same rules as the
//   int8 GEMMs (numerics/int8_gemm.h): kAuto takes the widest path the CPU and
//   KVSTASH_CPU_PATH (common/cpu_path.h) allow; kAmx means kAvx512 (no AMX kernel).
//
// Thread-safety: PackedQ4_1 is immutable after PackQ4_1; the functions are reentrant.
// Callers split row blocks over threads; each output is written by one call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/result.h"
#include "numerics/ggml_ops.h"
#include "numerics/int8_gemm.h"

namespace kvstash::model::ggml {

inline constexpr uint32_t kRowBlock = 16;  // weight rows per packed block (16 lanes)

// Bytes of nibbles per (row block, Q4_1 block): 8 quads x 16 rows x 4.
inline constexpr uint32_t kPackedQuadBytes = kRowBlock * kBlock;

// Q4_1 weights [rows, blocks * 32] in the layout above.
struct PackedQ4_1 {
  uint32_t rows = 0;        // output rows
  uint32_t blocks = 0;      // Q4_1 blocks per row
  uint32_t row_blocks = 0;  // ceil(rows / 16)
  std::vector<uint8_t> q;   // [row_blocks][blocks][8][16][4]
  std::vector<float> d, m;  // [row_blocks][blocks][16]
};

// Packs `rows` rows of `blocks` unpacked blocks each (w row-major, rows * blocks
// entries). InvalidArgument when w.size() != rows * blocks or either is 0.
Status PackQ4_1(std::span<const UnpackedQ4_1> w, uint32_t rows, uint32_t blocks, PackedQ4_1* out);

enum class GgmlPath : uint8_t { kScalar, kAvx2, kAvx512 };

// The path `backend` selects. NotSupported when it forces AVX2 or AVX-512 on a CPU (or
// under a KVSTASH_CPU_PATH) without it.
Result<GgmlPath> ResolveGgmlPath(spec::GemmBackend backend);

// "scalar", "avx2", "avx512".
const char* GgmlPathName(GgmlPath path);

// Rows [16 * row_block, min(16 * row_block + 16, w.rows)) for tokens [0, tokens):
// y[t * y_stride + o] as above. x holds tokens * w.blocks Q8_1 blocks (row t at
// x + t * w.blocks); xd, xs their d and s converted to fp32 (Q8_1Scales).
// REQUIRES: path kAvx2 or kAvx512 and the CPU has it (ResolveGgmlPath);
// row_block < w.row_blocks; y_stride >= w.rows.
void GemmRowBlock(GgmlPath path, const PackedQ4_1& w, uint32_t row_block, const BlockQ8_1* x, const float* xd,
                  const float* xs, uint32_t tokens, float* y, size_t y_stride);

// xd[i] = fp32 of x[i].d, xs[i] = fp32 of x[i].s for i in [0, n) (exact conversions).
void Q8_1Scales(const BlockQ8_1* x, size_t n, float* xd, float* xs);

namespace internal {
// The kernels behind GemmRowBlock (same contract), one per file.
void GemmRowBlockAvx2(const PackedQ4_1& w, uint32_t row_block, const BlockQ8_1* x, const float* xd,
                      const float* xs, uint32_t tokens, float* y, size_t y_stride);
void GemmRowBlockAvx512(const PackedQ4_1& w, uint32_t row_block, const BlockQ8_1* x, const float* xd,
                        const float* xs, uint32_t tokens, float* y, size_t y_stride);
}  // namespace internal

}  // namespace kvstash::model::ggml
