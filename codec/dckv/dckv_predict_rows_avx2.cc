// AVX2 path of dckv_predict_rows_internal.h (compiled with -mavx2; entered only after
// SynthesisHasAvx2()): tiles of up to 4 rows x 16 columns, 8 ymm accumulators. A term
// whose u is 0 is computed and then blended away (the lane keeps its value), so the
// result equals the portable loop's skip bit for bit.
#include <immintrin.h>

#include <cstddef>

#include "codec/dckv/dckv_predict_rows_internal.h"

namespace kvstash::dckv::internal {
namespace {

constexpr uint32_t kRows = 4;

template <uint32_t kTileRows>
void PredictTile(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t col,
                 float* mu) {
  const float* bias = map + static_cast<size_t>(inputs) * n_active + col;
  __m256 a0[kTileRows], a1[kTileRows];
#pragma GCC unroll 4
  for (uint32_t r = 0; r < kTileRows; ++r) a0[r] = _mm256_loadu_ps(bias), a1[r] = _mm256_loadu_ps(bias + 8);
  for (uint32_t j = 0; j < inputs; ++j) {
    const float* m = map + static_cast<size_t>(j) * n_active + col;
    const __m256 w0 = _mm256_loadu_ps(m), w1 = _mm256_loadu_ps(m + 8);
#pragma GCC unroll 4
    for (uint32_t r = 0; r < kTileRows; ++r) {
      const __m256 v = _mm256_broadcast_ss(u + static_cast<size_t>(r) * inputs + j);
      const __m256 keep = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ);
      a0[r] = _mm256_blendv_ps(a0[r], _mm256_add_ps(a0[r], _mm256_mul_ps(v, w0)), keep);
      a1[r] = _mm256_blendv_ps(a1[r], _mm256_add_ps(a1[r], _mm256_mul_ps(v, w1)), keep);
    }
  }
#pragma GCC unroll 4
  for (uint32_t r = 0; r < kTileRows; ++r) {
    float* out = mu + static_cast<size_t>(r) * n_active + col;
    _mm256_storeu_ps(out, a0[r]);
    _mm256_storeu_ps(out + 8, a1[r]);
  }
}

template <uint32_t kTileRows>
void Rows(const float* map, uint32_t inputs, uint32_t n_active, const float* u, float* mu) {
  for (uint32_t col = 0; col + 16 <= n_active; col += 16)
    PredictTile<kTileRows>(map, inputs, n_active, u, col, mu);
}

}  // namespace

void PredictRowsAvx2(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t count,
                     float* mu) {
  ForRowBlocks<kRows>(u, count, inputs, n_active, mu, [&](auto rows, const float* ub, float* mb) {
    Rows<decltype(rows)::value>(map, inputs, n_active, ub, mb);
  });
  PredictRowsPortableColumns(map, inputs, n_active, u, count, n_active / 16 * 16, mu);
}

}  // namespace kvstash::dckv::internal
