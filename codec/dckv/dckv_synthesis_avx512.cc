// AVX-512 tile kernel of dckv_synthesis.h (compiled with the AVX-512 flags; entered
// only after SynthesisHasAvx512()): up to 12 rows x 32 columns (two panels) per call,
// 24 zmm accumulators, the rows' coefficients interleaved so that one pointer reaches
// them all (13 general registers would otherwise spill).
// Separate vmulps and vaddps, never FMA: the same fp32 operations as the portable
// kernel and the reference loop. Skipped terms are masked out of the add (the lane
// keeps its value, as the reference loop's skip does).
#include <immintrin.h>

#include "codec/dckv/dckv_synthesis_internal.h"

namespace kvstash::dckv::internal {
namespace {

// kRows rows (4, 8 or 12) of the tile; the loops over rows unroll completely, so the
// accumulators stay in registers.
template <uint32_t kRows, bool kZeros>
void Tile(const float* panel0, const float* panel1, uint32_t n_active, const float* coef, const float* mean32,
          float* tile) {
  constexpr uint32_t TR = kSynthesisTileRowsAvx512;
  const __m512 m0 = _mm512_loadu_ps(mean32), m1 = _mm512_loadu_ps(mean32 + 16);
  __m512 a0[kRows], a1[kRows];
#pragma GCC unroll 12
  for (uint32_t r = 0; r < kRows; ++r) a0[r] = m0, a1[r] = m1;
  for (uint32_t i = 0; i < n_active; ++i) {
    const __m512 w0 = _mm512_loadu_ps(panel0 + 16ull * i), w1 = _mm512_loadu_ps(panel1 + 16ull * i);
    const float* c = coef + static_cast<size_t>(TR) * i;
#pragma GCC unroll 12
    for (uint32_t r = 0; r < kRows; ++r) {
      const __m512 cr = _mm512_set1_ps(c[r]);
      const __m512 p0 = _mm512_mul_ps(cr, w0), p1 = _mm512_mul_ps(cr, w1);
      if constexpr (kZeros) {
        const __mmask16 keep = _mm512_cmp_ps_mask(cr, _mm512_setzero_ps(), _CMP_NEQ_UQ);
        a0[r] = _mm512_mask_add_ps(a0[r], keep, a0[r], p0);
        a1[r] = _mm512_mask_add_ps(a1[r], keep, a1[r], p1);
      } else {
        a0[r] = _mm512_add_ps(a0[r], p0);
        a1[r] = _mm512_add_ps(a1[r], p1);
      }
    }
  }
#pragma GCC unroll 12
  for (uint32_t r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(tile + 32 * r, a0[r]);
    _mm512_storeu_ps(tile + 32 * r + 16, a1[r]);
  }
}

template <uint32_t kRows>
void TileRows(const float* panel0, const float* panel1, uint32_t n_active, const float* coef, bool zeros,
              const float* mean32, float* tile) {
  if (zeros) {
    Tile<kRows, true>(panel0, panel1, n_active, coef, mean32, tile);
  } else {
    Tile<kRows, false>(panel0, panel1, n_active, coef, mean32, tile);
  }
}

}  // namespace

void SynthesisTileAvx512(const float* panel0, const float* panel1, uint32_t n_active, const float* coef,
                         uint32_t nr, bool zeros, const float* mean32, float* tile) {
  if (nr <= 4) return TileRows<4>(panel0, panel1, n_active, coef, zeros, mean32, tile);
  if (nr <= 8) return TileRows<8>(panel0, panel1, n_active, coef, zeros, mean32, tile);
  TileRows<12>(panel0, panel1, n_active, coef, zeros, mean32, tile);
}

}  // namespace kvstash::dckv::internal
