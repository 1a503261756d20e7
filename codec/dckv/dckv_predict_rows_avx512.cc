// AVX-512 path of dckv_predict_rows_internal.h (compiled with the AVX-512 flags;
// entered only after SynthesisHasAvx512()): tiles of up to 8 rows x 32 columns, 16 zmm
// accumulators; the last columns under a lane mask (masked loads read nothing past
// n_active, masked stores write nothing past it). A term whose u is 0 is masked out of
// the add (the lane keeps its value), as the portable loop's skip.
#include <immintrin.h>

#include <cstddef>

#include "codec/dckv/dckv_predict_rows_internal.h"

namespace kvstash::dckv::internal {
namespace {

constexpr uint32_t kRows = 8;

template <uint32_t kTileRows>
void PredictTile(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t col,
                 __mmask16 k0, __mmask16 k1, float* mu) {
  // Offset of the second 16 columns; 0 when they are all masked off, so that no pointer
  // is formed past the end of map or mu (the masked accesses touch nothing).
  const uint32_t h1 = k1 != 0 ? 16 : 0;
  const float* bias = map + static_cast<size_t>(inputs) * n_active + col;
  __m512 a0[kTileRows], a1[kTileRows];
  const __m512 b0 = _mm512_maskz_loadu_ps(k0, bias), b1 = _mm512_maskz_loadu_ps(k1, bias + h1);
#pragma GCC unroll 8
  for (uint32_t r = 0; r < kTileRows; ++r) a0[r] = b0, a1[r] = b1;
  for (uint32_t j = 0; j < inputs; ++j) {
    const float* m = map + static_cast<size_t>(j) * n_active + col;
    const __m512 w0 = _mm512_maskz_loadu_ps(k0, m), w1 = _mm512_maskz_loadu_ps(k1, m + h1);
#pragma GCC unroll 8
    for (uint32_t r = 0; r < kTileRows; ++r) {
      const __m512 v = _mm512_set1_ps(u[static_cast<size_t>(r) * inputs + j]);
      const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      a0[r] = _mm512_mask_add_ps(a0[r], keep, a0[r], _mm512_mul_ps(v, w0));
      a1[r] = _mm512_mask_add_ps(a1[r], keep, a1[r], _mm512_mul_ps(v, w1));
    }
  }
#pragma GCC unroll 8
  for (uint32_t r = 0; r < kTileRows; ++r) {
    float* out = mu + static_cast<size_t>(r) * n_active + col;
    _mm512_mask_storeu_ps(out, k0, a0[r]);
    _mm512_mask_storeu_ps(out + h1, k1, a1[r]);
  }
}

inline __mmask16 LaneMask(uint32_t lanes) {
  return lanes >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << lanes) - 1);
}

template <uint32_t kTileRows>
void Rows(const float* map, uint32_t inputs, uint32_t n_active, const float* u, float* mu) {
  for (uint32_t col = 0; col < n_active; col += 32) {
    const uint32_t left = n_active - col;
    PredictTile<kTileRows>(map, inputs, n_active, u, col, LaneMask(left), LaneMask(left > 16 ? left - 16 : 0),
                           mu);
  }
}

}  // namespace

void PredictRowsAvx512(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t count,
                       float* mu) {
  ForRowBlocks<kRows>(u, count, inputs, n_active, mu, [&](auto rows, const float* ub, float* mb) {
    Rows<decltype(rows)::value>(map, inputs, n_active, ub, mb);
  });
}

}  // namespace kvstash::dckv::internal
