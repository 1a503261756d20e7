// AVX-512 contexts (spec_context_simd.h): ScalarContext on 16 lanes for bf16, f16 and
// fp8 e4m3 targets. Compiled with the AVX-512 F/BW/DQ/VL flags (codec/CMakeLists.txt)
// and entered only after spec::CpuHasAvx512(). A row's last partial vector uses masked
// loads and stores.
#include <immintrin.h>

#include "codec/spec/spec_context_simd.h"

namespace kvstash::spec::internal {
namespace {

// How far ahead of the loads the predictions are prefetched: the decoder streams them
// from memory once (tens of MB per prefix), and the hardware prefetcher alone left this
// loop waiting on them (measured on Sapphire Rapids: 45 ms cold vs 11 ms in cache for
// 17.7 M scalars). A prefetch past the end of mu is harmless (it never faults).
constexpr size_t kPrefetchFloats = 1024;

__m512i Set(int v) { return _mm512_set1_epi32(v); }

// FloorToInt (det_math.h) per lane, for |x| < 2^23: truncate, minus 1 where that rounded up.
__m512i Floor(__m512 x) {
  const __m512i t = _mm512_cvttps_epi32(x);
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_cvtepi32_ps(t), x, _CMP_GT_OQ);
  return _mm512_mask_sub_epi32(t, up, t, Set(1));
}

// ShiftRightRne (kvstash/dtype_bits.h) per lane: v >> s rounded to nearest, ties to even,
// for v < 2^31 and 1 <= s <= 30.
__m512i ShiftRightRne(__m512i v, __m512i s) {
  const __m512i q = _mm512_srlv_epi32(v, s);
  const __m512i half = _mm512_sllv_epi32(Set(1), _mm512_sub_epi32(s, Set(1)));
  const __m512i rem = _mm512_and_si512(v, _mm512_sub_epi32(_mm512_add_epi32(half, half), Set(1)));
  const __mmask16 up = _mm512_cmpgt_epi32_mask(rem, half) |
                       (_mm512_cmpeq_epi32_mask(rem, half) & _mm512_test_epi32_mask(q, Set(1)));
  return _mm512_mask_add_epi32(q, up, q, Set(1));
}

// The target value q of each lane of m (the low 16 or 8 bits of a lane), its ordinal,
// the log2 of its ulp and its value in fp32: the first block of ScalarContext.
struct Quantized {
  __m512i ordinal;
  __m512i ulp_log2;
  __m512 value;
};

// Bf16Ordinal / F16Ordinal (one map): negative values complement all 16 bits, others set the sign bit.
__m512i Ordinal16(__m512i q) {
  const __mmask16 neg = _mm512_test_epi32_mask(q, Set(0x8000));
  return _mm512_mask_xor_epi32(_mm512_xor_si512(q, Set(0x8000)), neg, q, Set(0xFFFF));
}

Quantized Bf16(__m512 m) {
  // F32ToBf16: NaN keeps sign and top payload with the quiet bit; else RNE.
  const __m512i x = _mm512_castps_si512(m);
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, Set(0x7FFFFFFF)), Set(0x7F800000));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(Set(0x7FFF), _mm512_and_si512(hi, Set(1)))), 16);
  const __m512i q = _mm512_mask_or_epi32(rounded, nan, hi, Set(0x0040));
  // Bf16UlpLog2: max(exponent, 1) - 134.
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(q, 7), Set(0xFF));
  return {Ordinal16(q), _mm512_sub_epi32(_mm512_max_epi32(e, Set(1)), Set(134)),
          _mm512_castsi512_ps(_mm512_slli_epi32(q, 16))};
}

// The two narrow targets below share the rounding of F32ToF16 / F32ToFp8E4M3: the
// magnitude's exponent and mantissa fields, ShiftRightRne of the fp32 bits rebased
// (normal results) or of the significand (subnormal results), 0 below half the smallest
// subnormal. A format is named by min_normal_e, the fp32 biased exponent of its smallest
// normal (f16 113, e4m3 121), and mant_drop, the fp32 mantissa bits it drops (13, 20);
// min_sub_e is the smallest fp32 exponent that does not round to 0 (102, 117). Lanes at
// or above the format's overflow point, Inf and NaN are the caller's.
__m512i RoundMagnitude(__m512i ax, int min_normal_e, int mant_drop, int min_sub_e) {
  const __m512i e = _mm512_srli_epi32(ax, 23);
  const __mmask16 sub = _mm512_cmplt_epi32_mask(e, Set(min_normal_e));
  const __m512i mant = _mm512_or_si512(_mm512_and_si512(ax, Set(0x7FFFFF)), Set(0x800000));
  const __m512i v = _mm512_mask_mov_epi32(_mm512_sub_epi32(ax, Set((min_normal_e - 1) << 23)), sub, mant);
  const __m512i s =
      _mm512_mask_mov_epi32(Set(mant_drop), sub, _mm512_sub_epi32(Set(min_normal_e + mant_drop), e));
  return _mm512_maskz_mov_epi32(_mm512_cmpge_epi32_mask(e, Set(min_sub_e)), ShiftRightRne(v, s));
}

Quantized F16(__m512 m) {
  // F32ToF16: the rounded magnitude, then overflow to Inf and NaN (quiet, top payload).
  const __m512i x = _mm512_castps_si512(m);
  const __m512i ax = _mm512_and_si512(x, Set(0x7FFFFFFF));
  __m512i h = RoundMagnitude(ax, 113, 13, 102);
  h = _mm512_mask_mov_epi32(h, _mm512_cmpge_epi32_mask(ax, Set(0x477FF000)), Set(0x7C00));
  h = _mm512_mask_mov_epi32(
      h, _mm512_cmpgt_epi32_mask(ax, Set(0x7F800000)),
      _mm512_or_si512(Set(0x7E00), _mm512_and_si512(_mm512_srli_epi32(ax, 13), Set(0x3FF))));
  const __m512i q = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x, 16), Set(0x8000)), h);
  // F16UlpLog2: max(exponent, 1) - 25. F16ToF32 is exact: the conversion instruction.
  const __m512i he = _mm512_and_si512(_mm512_srli_epi32(q, 10), Set(0x1F));
  return {Ordinal16(q), _mm512_sub_epi32(_mm512_max_epi32(he, Set(1)), Set(25)),
          _mm512_cvtph_ps(_mm512_cvtepi32_epi16(q))};
}

Quantized Fp8(__m512 m) {
  // F32ToFp8E4M3: the rounded magnitude, saturating at 448 (0x7E), and NaN (0x7F).
  const __m512i x = _mm512_castps_si512(m);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 24), Set(0x80));
  const __m512i ax = _mm512_and_si512(x, Set(0x7FFFFFFF));
  __m512i b = _mm512_min_epi32(RoundMagnitude(ax, 121, 20, 117), Set(0x7E));
  b = _mm512_mask_mov_epi32(b, _mm512_cmpgt_epi32_mask(ax, Set(0x7F800000)), Set(0x7F));
  const __m512i q = _mm512_or_si512(sign, b);
  // Fp8Ordinal: negative values complement the 8 bits, others set the sign bit.
  const __mmask16 neg = _mm512_test_epi32_mask(q, Set(0x80));
  const __m512i ordinal = _mm512_mask_xor_epi32(_mm512_xor_si512(q, Set(0x80)), neg, q, Set(0xFF));
  // Fp8UlpLog2: max(exponent, 1) - 10. Fp8E4M3ToF32: normal, subnormal mant * 2^-9, NaN.
  const __m512i qe = _mm512_and_si512(_mm512_srli_epi32(q, 3), Set(0xF));
  const __m512i qm = _mm512_and_si512(q, Set(0x7));
  const __m512 subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(qm), _mm512_set1_ps(0.001953125f));
  __m512i value =
      _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(qe, Set(120)), 23), _mm512_slli_epi32(qm, 20));
  value = _mm512_mask_mov_epi32(value, _mm512_cmpeq_epi32_mask(qe, _mm512_setzero_si512()),
                                _mm512_castps_si512(subnormal));
  value = _mm512_mask_mov_epi32(value, _mm512_cmpeq_epi32_mask(b, Set(0x7F)), Set(0x7FC00000));
  return {ordinal, _mm512_sub_epi32(_mm512_max_epi32(qe, Set(1)), Set(10)),
          _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(sign, 24), value))};
}

// ScalarContext on every scalar, with the target conversion `quantize` (Bf16, F16 or Fp8
// above). For fp8 the prediction is first divided by the scale: ScalarContext leaves a
// NaN undivided, and an x86 division returns its NaN operand quieted with its sign, which
// converts to the same fp8 NaN; every later use of a NaN prediction gives f = 0 either way.
template <Quantized (*quantize)(__m512)>
void Contexts(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma, size_t row,
              uint16_t* pred_ordinal, uint16_t* table) {
  const __m512 log2_scale = _mm512_set1_ps(p.log2_scale), s_min = _mm512_set1_ps(p.s_min);
  const __m512 inv_step = _mm512_set1_ps(p.inv_step), frac_bins_f = _mm512_set1_ps(p.frac_bins_f);
  const __m512 fp8_scale = _mm512_set1_ps(p.fp8_scale);
  const __m512i bucket_max = Set(static_cast<int>(p.buckets - 1));
  const __m512i bin_max = Set(static_cast<int>(p.frac_bins - 1));
  const __m512i frac_bins = Set(static_cast<int>(p.frac_bins));
  const __m512i zero = _mm512_setzero_si512();
  for (size_t base = 0; base < n; base += row) {
    for (size_t j = 0; j < row; j += 16) {
      const __mmask16 k = row - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (row - j)) - 1u);
      _mm_prefetch(reinterpret_cast<const char*>(mu + base + j + kPrefetchFloats), _MM_HINT_T0);
      __m512 m = _mm512_maskz_loadu_ps(k, mu + base + j);
      if (p.fp8) m = _mm512_div_ps(m, fp8_scale);
      const __m512 ls = _mm512_maskz_loadu_ps(k, log2_sigma + j);
      const Quantized q = quantize(m);
      const __m512i u = q.ulp_log2;
      // Bucket of the spread; a NaN spread takes bucket 0.
      const __m512 s = _mm512_sub_ps(_mm512_sub_ps(ls, log2_scale), _mm512_cvtepi32_ps(u));
      const __m512 sb = _mm512_mul_ps(_mm512_sub_ps(s, s_min), inv_step);
      const __mmask16 ordered = _mm512_cmp_ps_mask(sb, sb, _CMP_ORD_Q);
      const __m512 sb_clamped = _mm512_min_ps(_mm512_max_ps(sb, _mm512_set1_ps(-1.0f)), _mm512_set1_ps(1e6f));
      const __m512i bucket = _mm512_maskz_mov_epi32(ordered, Floor(sb_clamped));
      // Sub-ulp offset f = (m - pv) * 2^-u (0 where 2^-u is out of range), 0 unless in [-1/2, 1/2].
      const __mmask16 in_range = _mm512_cmpge_epi32_mask(u, Set(-126)) & _mm512_cmple_epi32_mask(u, Set(126));
      const __m512 inv_ulp =
          _mm512_castsi512_ps(_mm512_maskz_slli_epi32(in_range, _mm512_sub_epi32(Set(127), u), 23));
      const __m512 f0 = _mm512_mul_ps(_mm512_sub_ps(m, q.value), inv_ulp);
      const __mmask16 keep = _mm512_cmp_ps_mask(f0, _mm512_set1_ps(0.5f), _CMP_LE_OQ) &
                             _mm512_cmp_ps_mask(f0, _mm512_set1_ps(-0.5f), _CMP_GE_OQ);
      const __m512 f = _mm512_maskz_mov_ps(keep, f0);
      const __m512i bin = Floor(_mm512_mul_ps(_mm512_add_ps(f, _mm512_set1_ps(0.5f)), frac_bins_f));
      const __m512i t = _mm512_add_epi32(
          _mm512_mullo_epi32(_mm512_min_epi32(_mm512_max_epi32(bucket, zero), bucket_max), frac_bins),
          _mm512_min_epi32(_mm512_max_epi32(bin, zero), bin_max));
      _mm256_mask_storeu_epi16(pred_ordinal + base + j, k, _mm512_cvtepi32_epi16(q.ordinal));
      _mm256_mask_storeu_epi16(table + base + j, k, _mm512_cvtepi32_epi16(t));
    }
  }
}

}  // namespace

void ContextsAvx512(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma,
                    size_t row, uint16_t* pred_ordinal, uint16_t* table) {
  if (p.fp8) {
    Contexts<Fp8>(p, mu, n, log2_sigma, row, pred_ordinal, table);
  } else if (p.f16) {
    Contexts<F16>(p, mu, n, log2_sigma, row, pred_ordinal, table);
  } else {
    Contexts<Bf16>(p, mu, n, log2_sigma, row, pred_ordinal, table);
  }
}

}  // namespace kvstash::spec::internal
