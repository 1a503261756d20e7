// AVX2 path of dckv_axpy.h (compiled with -mavx2; entered only when the CPU has it).
#include <immintrin.h>

#include "codec/dckv/dckv_axpy.h"

namespace kvstash::dckv::internal {

void AxpyAvx2(float u, const float* x, float* acc, uint32_t n) {
  const __m256 uv = _mm256_set1_ps(u);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 p = _mm256_mul_ps(uv, _mm256_loadu_ps(x + i));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), p));
  }
  for (; i < n; ++i) acc[i] += u * x[i];
}

}  // namespace kvstash::dckv::internal
