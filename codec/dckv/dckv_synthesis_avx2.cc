// AVX2 tile kernel of dckv_synthesis.h (compiled with -mavx2; entered only after
// SynthesisHasAvx2()). Separate vmulps and vaddps, never FMA: the same fp32 operations
// as the portable kernel and the reference loop.
#include <immintrin.h>

#include "codec/dckv/dckv_synthesis_internal.h"

namespace kvstash::dckv::internal {
namespace {

template <bool kZeros>
void Tile(const float* panel, uint32_t n_active, const float* const* rows, const float* mean16, float* tile) {
  const __m256 m0 = _mm256_loadu_ps(mean16), m1 = _mm256_loadu_ps(mean16 + 8);
  __m256 a00 = m0, a01 = m1, a10 = m0, a11 = m1, a20 = m0, a21 = m1;
  __m256 a30 = m0, a31 = m1, a40 = m0, a41 = m1, a50 = m0, a51 = m1;
  const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3], *r4 = rows[4], *r5 = rows[5];
  const __m256 zero = _mm256_setzero_ps(), neg0 = _mm256_set1_ps(-0.0f);
  for (uint32_t i = 0; i < n_active; ++i) {
    const __m256 w0 = _mm256_loadu_ps(panel + 16ull * i), w1 = _mm256_loadu_ps(panel + 16ull * i + 8);
#define KVSTASH_DCKV_ROW(R)                                               \
  {                                                                       \
    const __m256 c = _mm256_broadcast_ss(r##R + i);                       \
    __m256 p0 = _mm256_mul_ps(c, w0), p1 = _mm256_mul_ps(c, w1);          \
    if constexpr (kZeros) { /* -0.0, also where 0 * w is NaN (w not finite) */ \
      const __m256 skip = _mm256_cmp_ps(c, zero, _CMP_EQ_OQ);            \
      p0 = _mm256_blendv_ps(p0, neg0, skip);                              \
      p1 = _mm256_blendv_ps(p1, neg0, skip);                              \
    }                                                                     \
    a##R##0 = _mm256_add_ps(a##R##0, p0);                                 \
    a##R##1 = _mm256_add_ps(a##R##1, p1);                                 \
  }
    KVSTASH_DCKV_ROW(0) KVSTASH_DCKV_ROW(1) KVSTASH_DCKV_ROW(2)
    KVSTASH_DCKV_ROW(3) KVSTASH_DCKV_ROW(4) KVSTASH_DCKV_ROW(5)
#undef KVSTASH_DCKV_ROW
  }
  _mm256_storeu_ps(tile + 0, a00), _mm256_storeu_ps(tile + 8, a01);
  _mm256_storeu_ps(tile + 16, a10), _mm256_storeu_ps(tile + 24, a11);
  _mm256_storeu_ps(tile + 32, a20), _mm256_storeu_ps(tile + 40, a21);
  _mm256_storeu_ps(tile + 48, a30), _mm256_storeu_ps(tile + 56, a31);
  _mm256_storeu_ps(tile + 64, a40), _mm256_storeu_ps(tile + 72, a41);
  _mm256_storeu_ps(tile + 80, a50), _mm256_storeu_ps(tile + 88, a51);
}

}  // namespace

void SynthesisTileAvx2(const float* panel, uint32_t n_active, const float* const* rows, bool zeros,
                       const float* mean16, float* tile) {
  if (zeros) {
    Tile<true>(panel, n_active, rows, mean16, tile);
  } else {
    Tile<false>(panel, n_active, rows, mean16, tile);
  }
}

}  // namespace kvstash::dckv::internal
