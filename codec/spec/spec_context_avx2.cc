// AVX2 bf16 contexts (spec_context_simd.h): ScalarContext on 8 lanes. Compiled with
// -mavx2 (codec/CMakeLists.txt) and entered only after spec::CpuHasAvx2(). A row's last
// partial vector runs the scalar body itself.
#include <immintrin.h>

#include "codec/spec/spec_context_simd.h"

namespace kvstash::spec::internal {
namespace {

// How far ahead of the loads the predictions are prefetched (as in spec_context_avx512.cc).
constexpr size_t kPrefetchFloats = 1024;

// FloorToInt (det_math.h) per lane, for |x| < 2^23: truncate, minus 1 where that rounded up
// (the compare mask is all ones, i.e. -1, in those lanes).
__m256i Floor(__m256 x) {
  const __m256i t = _mm256_cvttps_epi32(x);
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(t), x, _CMP_GT_OQ));
  return _mm256_add_epi32(t, up);
}

// The low 16 bits of 8 lanes holding values in [0, 65535].
__m128i Narrow(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

}  // namespace

void Bf16ContextsAvx2(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma,
                      size_t row, uint16_t* pred_ordinal, uint16_t* table) {
  const __m256 log2_scale = _mm256_set1_ps(p.log2_scale), s_min = _mm256_set1_ps(p.s_min);
  const __m256 inv_step = _mm256_set1_ps(p.inv_step), frac_bins_f = _mm256_set1_ps(p.frac_bins_f);
  const __m256i bucket_max = _mm256_set1_epi32(static_cast<int>(p.buckets - 1));
  const __m256i bin_max = _mm256_set1_epi32(static_cast<int>(p.frac_bins - 1));
  const __m256i frac_bins = _mm256_set1_epi32(static_cast<int>(p.frac_bins));
  const __m256i zero = _mm256_setzero_si256();
  const size_t vec_end = row - row % 8;
  for (size_t base = 0; base < n; base += row) {
    for (size_t j = 0; j < vec_end; j += 8) {
      _mm_prefetch(reinterpret_cast<const char*>(mu + base + j + kPrefetchFloats), _MM_HINT_T0);
      const __m256 m = _mm256_loadu_ps(mu + base + j);
      const __m256 ls = _mm256_loadu_ps(log2_sigma + j);
      // q = F32ToBf16(m): NaN keeps sign and top payload with the quiet bit; else RNE.
      const __m256i x = _mm256_castps_si256(m);
      const __m256i hi = _mm256_srli_epi32(x, 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                                             _mm256_set1_epi32(0x7F800000));
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(hi, _mm256_set1_epi32(1)))),
          16);
      const __m256i q = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x0040)), nan);
      // Bf16Ordinal: negative values complement all 16 bits, others set the sign bit.
      const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(q, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x8000));
      const __m256i ord = _mm256_xor_si256(q, _mm256_blendv_epi8(_mm256_set1_epi32(0x8000), _mm256_set1_epi32(0xFFFF), neg));
      // Bf16UlpLog2: max(exponent, 1) - 134.
      const __m256i e = _mm256_and_si256(_mm256_srli_epi32(q, 7), _mm256_set1_epi32(0xFF));
      const __m256i u = _mm256_sub_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(1)), _mm256_set1_epi32(134));
      const __m256 pv = _mm256_castsi256_ps(_mm256_slli_epi32(q, 16));
      // Bucket of the spread; a NaN spread takes bucket 0.
      const __m256 s = _mm256_sub_ps(_mm256_sub_ps(ls, log2_scale), _mm256_cvtepi32_ps(u));
      const __m256 sb = _mm256_mul_ps(_mm256_sub_ps(s, s_min), inv_step);
      const __m256i ordered = _mm256_castps_si256(_mm256_cmp_ps(sb, sb, _CMP_ORD_Q));
      const __m256 sb_clamped = _mm256_min_ps(_mm256_max_ps(sb, _mm256_set1_ps(-1.0f)), _mm256_set1_ps(1e6f));
      const __m256i bucket = _mm256_and_si256(ordered, Floor(sb_clamped));
      // Sub-ulp offset f = (m - pv) * 2^-u (0 where 2^-u is out of range), 0 unless in [-1/2, 1/2].
      const __m256i in_range = _mm256_andnot_si256(
          _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(-126), u), _mm256_cmpgt_epi32(u, _mm256_set1_epi32(126))),
          _mm256_set1_epi32(-1));
      const __m256 inv_ulp = _mm256_castsi256_ps(
          _mm256_and_si256(in_range, _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127), u), 23)));
      const __m256 f0 = _mm256_mul_ps(_mm256_sub_ps(m, pv), inv_ulp);
      const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(f0, _mm256_set1_ps(0.5f), _CMP_LE_OQ),
                                        _mm256_cmp_ps(f0, _mm256_set1_ps(-0.5f), _CMP_GE_OQ));
      const __m256 f = _mm256_and_ps(keep, f0);
      const __m256i bin = Floor(_mm256_mul_ps(_mm256_add_ps(f, _mm256_set1_ps(0.5f)), frac_bins_f));
      const __m256i t = _mm256_add_epi32(
          _mm256_mullo_epi32(_mm256_min_epi32(_mm256_max_epi32(bucket, zero), bucket_max), frac_bins),
          _mm256_min_epi32(_mm256_max_epi32(bin, zero), bin_max));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pred_ordinal + base + j), Narrow(ord));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(table + base + j), Narrow(t));
    }
    for (size_t j = vec_end; j < row; ++j) {
      ScalarContext(p, mu[base + j], log2_sigma[j], &pred_ordinal[base + j], &table[base + j]);
    }
  }
}

}  // namespace kvstash::spec::internal
