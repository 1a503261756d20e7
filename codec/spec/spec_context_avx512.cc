// AVX-512 bf16 contexts (spec_context_simd.h): ScalarContext on 16 lanes. Compiled with
// the AVX-512 F/BW/DQ/VL flags (codec/CMakeLists.txt) and entered only after
// spec::CpuHasAvx512(). A row's last partial vector uses masked loads and stores.
#include <immintrin.h>

#include "codec/spec/spec_context_simd.h"

namespace kvstash::spec::internal {
namespace {

// How far ahead of the loads the predictions are prefetched: the decoder streams them
// from memory once (tens of MB per prefix), and the hardware prefetcher alone left this
// loop waiting on them (measured on Sapphire Rapids: 45 ms cold vs 11 ms in cache for
// 17.7 M scalars). A prefetch past the end of mu is harmless (it never faults).
constexpr size_t kPrefetchFloats = 1024;

// FloorToInt (det_math.h) per lane, for |x| < 2^23: truncate, minus 1 where that rounded up.
__m512i Floor(__m512 x) {
  const __m512i t = _mm512_cvttps_epi32(x);
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_cvtepi32_ps(t), x, _CMP_GT_OQ);
  return _mm512_mask_sub_epi32(t, up, t, _mm512_set1_epi32(1));
}

}  // namespace

void Bf16ContextsAvx512(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma,
                        size_t row, uint16_t* pred_ordinal, uint16_t* table) {
  const __m512 log2_scale = _mm512_set1_ps(p.log2_scale), s_min = _mm512_set1_ps(p.s_min);
  const __m512 inv_step = _mm512_set1_ps(p.inv_step), frac_bins_f = _mm512_set1_ps(p.frac_bins_f);
  const __m512i bucket_max = _mm512_set1_epi32(static_cast<int>(p.buckets - 1));
  const __m512i bin_max = _mm512_set1_epi32(static_cast<int>(p.frac_bins - 1));
  const __m512i frac_bins = _mm512_set1_epi32(static_cast<int>(p.frac_bins));
  const __m512i zero = _mm512_setzero_si512();
  for (size_t base = 0; base < n; base += row) {
    for (size_t j = 0; j < row; j += 16) {
      const __mmask16 k = row - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (row - j)) - 1u);
      _mm_prefetch(reinterpret_cast<const char*>(mu + base + j + kPrefetchFloats), _MM_HINT_T0);
      const __m512 m = _mm512_maskz_loadu_ps(k, mu + base + j);
      const __m512 ls = _mm512_maskz_loadu_ps(k, log2_sigma + j);
      // q = F32ToBf16(m): NaN keeps sign and top payload with the quiet bit; else RNE.
      const __m512i x = _mm512_castps_si512(m);
      const __m512i hi = _mm512_srli_epi32(x, 16);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)),
                                                    _mm512_set1_epi32(0x7F800000));
      const __m512i rounded = _mm512_srli_epi32(
          _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
          16);
      const __m512i q = _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x0040));
      // Bf16Ordinal: negative values complement all 16 bits, others set the sign bit.
      const __mmask16 neg = _mm512_test_epi32_mask(q, _mm512_set1_epi32(0x8000));
      const __m512i ord = _mm512_mask_xor_epi32(_mm512_xor_si512(q, _mm512_set1_epi32(0x8000)), neg, q,
                                                _mm512_set1_epi32(0xFFFF));
      // Bf16UlpLog2: max(exponent, 1) - 134.
      const __m512i e = _mm512_and_si512(_mm512_srli_epi32(q, 7), _mm512_set1_epi32(0xFF));
      const __m512i u = _mm512_sub_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(1)), _mm512_set1_epi32(134));
      const __m512 pv = _mm512_castsi512_ps(_mm512_slli_epi32(q, 16));
      // Bucket of the spread; a NaN spread takes bucket 0.
      const __m512 s = _mm512_sub_ps(_mm512_sub_ps(ls, log2_scale), _mm512_cvtepi32_ps(u));
      const __m512 sb = _mm512_mul_ps(_mm512_sub_ps(s, s_min), inv_step);
      const __mmask16 ordered = _mm512_cmp_ps_mask(sb, sb, _CMP_ORD_Q);
      const __m512 sb_clamped = _mm512_min_ps(_mm512_max_ps(sb, _mm512_set1_ps(-1.0f)), _mm512_set1_ps(1e6f));
      const __m512i bucket = _mm512_maskz_mov_epi32(ordered, Floor(sb_clamped));
      // Sub-ulp offset f = (m - pv) * 2^-u (0 where 2^-u is out of range), 0 unless in [-1/2, 1/2].
      const __mmask16 in_range = _mm512_cmpge_epi32_mask(u, _mm512_set1_epi32(-126)) &
                                 _mm512_cmple_epi32_mask(u, _mm512_set1_epi32(126));
      const __m512 inv_ulp = _mm512_castsi512_ps(
          _mm512_maskz_slli_epi32(in_range, _mm512_sub_epi32(_mm512_set1_epi32(127), u), 23));
      const __m512 f0 = _mm512_mul_ps(_mm512_sub_ps(m, pv), inv_ulp);
      const __mmask16 keep = _mm512_cmp_ps_mask(f0, _mm512_set1_ps(0.5f), _CMP_LE_OQ) &
                             _mm512_cmp_ps_mask(f0, _mm512_set1_ps(-0.5f), _CMP_GE_OQ);
      const __m512 f = _mm512_maskz_mov_ps(keep, f0);
      const __m512i bin = Floor(_mm512_mul_ps(_mm512_add_ps(f, _mm512_set1_ps(0.5f)), frac_bins_f));
      const __m512i t = _mm512_add_epi32(
          _mm512_mullo_epi32(_mm512_min_epi32(_mm512_max_epi32(bucket, zero), bucket_max), frac_bins),
          _mm512_min_epi32(_mm512_max_epi32(bin, zero), bin_max));
      _mm256_mask_storeu_epi16(pred_ordinal + base + j, k, _mm512_cvtepi32_epi16(ord));
      _mm256_mask_storeu_epi16(table + base + j, k, _mm512_cvtepi32_epi16(t));
    }
  }
}

}  // namespace kvstash::spec::internal
