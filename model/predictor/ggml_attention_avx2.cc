// AVX2 + F16C attention steps of the ggml-q4_1 predictor (see ggml_attention_avx2.h).
// Built with -mavx2 -mf16c for this file only (model/predictor/CMakeLists.txt).
#include "model/predictor/ggml_attention_avx2.h"

#include <immintrin.h>

#include <algorithm>

#include "kvstash/dtype_bits.h"
#include "model/predictor/spec_predictor_avx2.h"
#include "numerics/det_math.h"

namespace kvstash::model::ggml::avx2 {
namespace {

inline __m256 RoundF16x8(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// F32ToBf16 then Bf16ToF32 on 8 lanes.
inline __m256 RoundBf16x8(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  const __m256i quiet = _mm256_or_si256(b, _mm256_set1_epi32(0x00400000));
  const __m256i top = _mm256_blendv_epi8(rounded, quiet, nan);
  return _mm256_castsi256_ps(_mm256_and_si256(top, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

inline float RoundOne(float x, DType dt) {
  return dt == DType::kBF16 ? Bf16ToF32(F32ToBf16(x)) : F16ToF32(F32ToF16(x));
}

}  // namespace

void RoundToDType(const float* x, float* y, size_t n, DType dt) {
  size_t i = 0;
  if (dt == DType::kBF16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, RoundBf16x8(_mm256_loadu_ps(x + i)));
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, RoundF16x8(_mm256_loadu_ps(x + i)));
  }
  for (; i < n; ++i) y[i] = RoundOne(x[i], dt);
}

void AttentionRow(const float* q, const float* k, const float* v, size_t stride, uint32_t n, uint32_t hd,
                  float scale, DType dt, float* scratch, float* out) {
  float* qr = scratch;
  float* e = scratch + hd;
  RoundToDType(q, qr, hd, dt);
  float m = -3.40282347e38f;
  for (uint32_t j = 0; j < n; ++j) {
    e[j] = spec::DMul(model::avx2::CanonicalDot(qr, k + j * stride, hd), scale);
    m = std::max(m, e[j]);
  }
  const __m256 vm = _mm256_set1_ps(m);
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(e + j, _mm256_sub_ps(_mm256_loadu_ps(e + j), vm));
  for (; j < n; ++j) e[j] = spec::DSub(e[j], m);
  model::avx2::DetExp(e, e, n);
  double sum = 0.0;
  for (j = 0; j < n; ++j) sum += static_cast<double>(e[j]);
  const auto inv = static_cast<float>(1.0 / sum);
  const __m256 vinv = _mm256_set1_ps(inv);
  for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(e + j, _mm256_mul_ps(_mm256_loadu_ps(e + j), vinv));
  for (; j < n; ++j) e[j] = spec::DMul(e[j], inv);
  RoundToDType(e, e, n, dt);
  std::fill_n(out, hd, 0.0f);
  for (j = 0; j < n; ++j) {
    const __m256 p = _mm256_set1_ps(e[j]);
    const float* vv = v + j * stride;
    for (uint32_t d = 0; d < hd; d += 8) {
      _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_loadu_ps(out + d), _mm256_mul_ps(p, _mm256_loadu_ps(vv + d))));
    }
  }
}

}  // namespace kvstash::model::ggml::avx2
