// AVX-512 VNNI kernel of numerics/int8_gemm_packed.h (GemmPacked with the kAvx512 /
// kAuto backend on a CPU with AVX-512 F/BW/VL/VNNI). Built with -mavx512f -mavx512bw
// -mavx512vl -mavx512dq -mavx512vnni for this file only (codec/CMakeLists.txt), entered
// only after the run-time check spec::CpuHasAvx512(); no other file gets these flags.
//
// Layout: the packed weights of the header, unchanged. One 32-byte load at pair p of a
// 16-channel block holds (w_c[k], w_c[k+1]) for c = 0..15 in channel order, so
// vpmovsxbw widens it to 16 int32 lanes of int16 pairs, lane c = output channel c.
// vpdpwssd with the token's activation pair (a[k], a[k+1]) broadcast to every lane
// (embedded {1to16} broadcast from memory) adds a[k]*w_c[k] + a[k+1]*w_c[k+1] to lane
// c: 16 output channels per instruction. The register block is kRows tokens x 2 channel
// blocks (24 zmm accumulators, 2 weight vectors); a lone last block of a thread's range
// runs the same code with one channel block.
//
// Exactness: vpdpwssd is the non-saturating form: each int16 x int16 product and the
// two-product sum are exact in int32, and the running int32 sum of one group is exact
// because its true value is bounded by 32767 * 128 * kMaxInt16Group < 2^31 (int16
// activations) or 128 * 128 * 2^17 (8-bit ones), the header's preconditions. So each
// lane holds exactly the reference's int32 dot_g, whatever the blocking. The fp32
// epilogue is the reference's per output element, in its order: s = a_scale * b_scale,
// then o = o + float(dot_g) * s for g = 0, 1, ... (vcvtdq2ps, vmulps, vmulps, vaddps:
// separate, correctly rounded operations with the default MXCSR rounding; the
// project-wide -ffp-contract=off keeps the compiler from fusing them, although
// -mavx512f enables FMA instructions). Padding channels (weights and scales 0) are
// computed and never stored.
// GCC 12 reports its own _mm512_undefined_ps() (inside _mm512_cvtepi32_ps) as maybe
// uninitialised: a known false positive of the header, silenced for this file (GCC only).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "numerics/int8_gemm_packed.h"

namespace kvstash::spec::internal {
namespace {

constexpr int kRows = 12;  // tokens per register block: 12 x 2 zmm accumulators

inline __m512i BroadcastPair(const int16_t* p) {
  int32_t pair;
  std::memcpy(&pair, p, sizeof(pair));
  return _mm512_set1_epi32(pair);
}

inline __m512i WidenPair(const int8_t* w) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
}

// o[0..15] = o + float(dot) * (sa * sb): the reference's three roundings, in its order.
inline void Accumulate(float* o, __m512i dot, __m512 sa, __m512 sb) {
  const __m512 scale = _mm512_mul_ps(sa, sb);
  _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale)));
}

// MR tokens (rows row..row+MR-1) x NB channel blocks (blk, blk+1): every group in
// ascending order, fp32 results into tile [MR][NB * 16] (row stride NB * 16).
template <int MR, int NB>
void RowBlocks(const PackedActivations& a, const PackedWeights& b, int row, int blk, float* tile) {
  const PackedShape& s = b.shape;
  const size_t lda = static_cast<size_t>(s.stride());
  const int np = b.blocks * kPackedBlock;
  const size_t panel_bytes = static_cast<size_t>(s.pairs) * 2 * kPackedBlock;
  const int16_t* arow = a.q.data() + static_cast<size_t>(row) * lda;
  const int8_t* panel0 = b.data.data() + static_cast<size_t>(blk) * panel_bytes;
  const int8_t* panel1 = panel0 + (NB > 1 ? panel_bytes : 0);
  for (int i = 0; i < MR * NB * kPackedBlock; ++i) tile[i] = 0.0f;
  for (int g = 0; g < s.groups; ++g) {
    const int p0 = g * s.group_pairs, pairs = s.PairsOf(g);
    const int16_t* ag = arow + 2 * p0;
    const int8_t* w0p = panel0 + 32 * static_cast<size_t>(p0);
    const int8_t* w1p = panel1 + 32 * static_cast<size_t>(p0);
    // Named accumulators (not an array, which GCC keeps in memory across the loop).
    const __m512i z = _mm512_setzero_si512();
    __m512i c0a = z, c1a = z, c2a = z, c3a = z, c4a = z, c5a = z, c6a = z, c7a = z, c8a = z, c9a = z,
            c10a = z, c11a = z;
    __m512i c0b = z, c1b = z, c2b = z, c3b = z, c4b = z, c5b = z, c6b = z, c7b = z, c8b = z, c9b = z,
            c10b = z, c11b = z;
    for (int p = 0; p < pairs; ++p) {
      const __m512i w0 = WidenPair(w0p + 32 * p);
      const __m512i w1 = NB > 1 ? WidenPair(w1p + 32 * p) : w0;
      const int16_t* ap = ag + 2 * p;
// The rows are one macro call each, laid out as a table (not clang-formatted).
// clang-format off
#define KVSTASH_ROW(R)                                              \
  if constexpr (MR > R) {                                           \
    const __m512i x = BroadcastPair(ap + R * lda);                  \
    c##R##a = _mm512_dpwssd_epi32(c##R##a, w0, x);                  \
    if constexpr (NB > 1) c##R##b = _mm512_dpwssd_epi32(c##R##b, w1, x); \
  }
      KVSTASH_ROW(0) KVSTASH_ROW(1) KVSTASH_ROW(2) KVSTASH_ROW(3) KVSTASH_ROW(4) KVSTASH_ROW(5)
      KVSTASH_ROW(6) KVSTASH_ROW(7) KVSTASH_ROW(8) KVSTASH_ROW(9) KVSTASH_ROW(10) KVSTASH_ROW(11)
#undef KVSTASH_ROW
      // clang-format on
    }
    static_assert(MR <= kRows && NB <= 2);
    const float* sb = b.scales.data() + static_cast<size_t>(g) * np + blk * kPackedBlock;
    const __m512 sb0 = _mm512_loadu_ps(sb);
    const __m512 sb1 = NB > 1 ? _mm512_loadu_ps(sb + kPackedBlock) : sb0;
    const float* sa = a.scales.data() + static_cast<size_t>(row) * s.groups + g;
// The rows are one macro call each, laid out as a table (not clang-formatted).
// clang-format off
#define KVSTASH_ROW(R)                                                                  \
  if constexpr (MR > R) {                                                               \
    const __m512 va = _mm512_set1_ps(sa[R * s.groups]);                                 \
    Accumulate(tile + R * NB * kPackedBlock, c##R##a, va, sb0);                         \
    if constexpr (NB > 1) Accumulate(tile + (R * NB + 1) * kPackedBlock, c##R##b, va, sb1); \
  }
    KVSTASH_ROW(0) KVSTASH_ROW(1) KVSTASH_ROW(2) KVSTASH_ROW(3) KVSTASH_ROW(4) KVSTASH_ROW(5)
    KVSTASH_ROW(6) KVSTASH_ROW(7) KVSTASH_ROW(8) KVSTASH_ROW(9) KVSTASH_ROW(10) KVSTASH_ROW(11)
#undef KVSTASH_ROW
    // clang-format on
  }
}

using RowBlocksFn = void (*)(const PackedActivations&, const PackedWeights&, int, int, float*);

template <int NB, int... MR>
constexpr auto MakeTable(std::integer_sequence<int, MR...>) {
  return std::array<RowBlocksFn, sizeof...(MR) + 1>{nullptr, RowBlocks<MR + 1, NB>...};
}
constexpr auto kOneBlock = MakeTable<1>(std::make_integer_sequence<int, kRows>());
constexpr auto kTwoBlocks = MakeTable<2>(std::make_integer_sequence<int, kRows>());

}  // namespace

void GemmPackedAvx512(const PackedActivations& a, const PackedWeights& b, float* out, int block_begin,
                      int block_end) {
  // Tokens per tile: its activations (~256 KiB) stay in L2 while every channel block
  // of this thread passes over them; the two blocks' weight panels stay in L1 / L2.
  const int row_bytes = 2 * b.shape.stride();
  const int tile_rows = std::max(kRows, (262144 / std::max(row_bytes, 1)) / kRows * kRows);
  alignas(64) float tile[kRows * 2 * kPackedBlock];
  for (int i0 = 0; i0 < a.m; i0 += tile_rows) {
    const int i1 = std::min(a.m, i0 + tile_rows);
    for (int blk = block_begin; blk < block_end; blk += 2) {
      const int nb = std::min(2, block_end - blk);
      const int j0 = blk * kPackedBlock, cols = std::min(nb * kPackedBlock, b.n - j0);
      for (int i = i0; i < i1; i += kRows) {
        const int rows = std::min(kRows, i1 - i);
        (nb == 2 ? kTwoBlocks : kOneBlock)[rows](a, b, i, blk, tile);
        for (int r = 0; r < rows; ++r) {
          std::memcpy(out + static_cast<size_t>(i + r) * b.n + j0, tile + r * nb * kPackedBlock,
                      sizeof(float) * cols);
        }
      }
    }
  }
}

}  // namespace kvstash::spec::internal
