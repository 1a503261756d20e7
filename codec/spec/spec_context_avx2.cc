// AVX2 contexts (spec_context_simd.h): ScalarContext on 8 lanes for bf16, f16 and fp8
// e4m3 targets. Compiled with -mavx2 (codec/CMakeLists.txt; no F16C: the f16
// conversions are integer code) and entered only after spec::CpuHasAvx2(). A row's last
// partial vector runs the scalar body itself.
#include <immintrin.h>

#include "codec/spec/spec_context_simd.h"

namespace kvstash::spec::internal {
namespace {

// How far ahead of the loads the predictions are prefetched (as in spec_context_avx512.cc).
constexpr size_t kPrefetchFloats = 1024;

__m256i Set(int v) { return _mm256_set1_epi32(v); }
// Lane masks (all ones or zero per lane) for signed 32-bit compares.
__m256i Gt(__m256i a, __m256i b) { return _mm256_cmpgt_epi32(a, b); }
__m256i Lt(__m256i a, __m256i b) { return _mm256_cmpgt_epi32(b, a); }
__m256i Ge(__m256i a, __m256i b) { return _mm256_xor_si256(Lt(a, b), Set(-1)); }
__m256i Eq(__m256i a, __m256i b) { return _mm256_cmpeq_epi32(a, b); }
// mask ? b : a, per lane.
__m256i Select(__m256i mask, __m256i a, __m256i b) { return _mm256_blendv_epi8(a, b, mask); }

// FloorToInt (det_math.h) per lane, for |x| < 2^23: truncate, minus 1 where that rounded up
// (the compare mask is all ones, i.e. -1, in those lanes).
__m256i Floor(__m256 x) {
  const __m256i t = _mm256_cvttps_epi32(x);
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(t), x, _CMP_GT_OQ));
  return _mm256_add_epi32(t, up);
}

// ShiftRightRne (kvstash/dtype_bits.h) per lane: v >> s rounded to nearest, ties to even,
// for v < 2^31 and 1 <= s <= 30.
__m256i ShiftRightRne(__m256i v, __m256i s) {
  const __m256i q = _mm256_srlv_epi32(v, s);
  const __m256i half = _mm256_sllv_epi32(Set(1), _mm256_sub_epi32(s, Set(1)));
  const __m256i rem = _mm256_and_si256(v, _mm256_sub_epi32(_mm256_add_epi32(half, half), Set(1)));
  const __m256i odd = Eq(_mm256_and_si256(q, Set(1)), Set(1));
  const __m256i up = _mm256_or_si256(Gt(rem, half), _mm256_and_si256(Eq(rem, half), odd));
  return _mm256_sub_epi32(q, up);  // up is -1 where rounding up
}

// The low 16 bits of 8 lanes holding values in [0, 65535].
__m128i Narrow(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

// The target value q of each lane of m, its ordinal, the log2 of its ulp and its value
// in fp32: the first block of ScalarContext.
struct Quantized {
  __m256i ordinal;
  __m256i ulp_log2;
  __m256 value;
};

// Bf16Ordinal / F16Ordinal (one map): negative values complement all 16 bits, others set the sign bit.
__m256i Ordinal16(__m256i q) {
  const __m256i neg = Eq(_mm256_and_si256(q, Set(0x8000)), Set(0x8000));
  return _mm256_xor_si256(q, Select(neg, Set(0x8000), Set(0xFFFF)));
}

Quantized Bf16(__m256 m) {
  // F32ToBf16: NaN keeps sign and top payload with the quiet bit; else RNE.
  const __m256i x = _mm256_castps_si256(m);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i nan = Gt(_mm256_and_si256(x, Set(0x7FFFFFFF)), Set(0x7F800000));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(Set(0x7FFF), _mm256_and_si256(hi, Set(1)))), 16);
  const __m256i q = Select(nan, rounded, _mm256_or_si256(hi, Set(0x0040)));
  // Bf16UlpLog2: max(exponent, 1) - 134.
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(q, 7), Set(0xFF));
  return {Ordinal16(q), _mm256_sub_epi32(_mm256_max_epi32(e, Set(1)), Set(134)),
          _mm256_castsi256_ps(_mm256_slli_epi32(q, 16))};
}

// The two narrow targets below share the rounding of F32ToF16 / F32ToFp8E4M3 and the
// widening of F16ToF32 / Fp8E4M3ToF32 for finite values. As in spec_context_avx512.cc: a
// format is named by min_normal_e, the fp32 biased exponent of its smallest normal (f16
// 113, e4m3 121), and mant_drop, the fp32 mantissa bits it drops (13, 20); min_sub_e is
// the smallest fp32 exponent that does not round to 0 (102, 117). RoundMagnitude gives
// the exponent and mantissa fields (ShiftRightRne of the fp32 bits rebased, or of the
// significand for subnormal results); lanes at or above the overflow point, Inf and NaN
// are the caller's.
__m256i RoundMagnitude(__m256i ax, int min_normal_e, int mant_drop, int min_sub_e) {
  const __m256i e = _mm256_srli_epi32(ax, 23);
  const __m256i sub = Lt(e, Set(min_normal_e));
  const __m256i mant = _mm256_or_si256(_mm256_and_si256(ax, Set(0x7FFFFF)), Set(0x800000));
  const __m256i v = Select(sub, _mm256_sub_epi32(ax, Set((min_normal_e - 1) << 23)), mant);
  const __m256i s = Select(sub, Set(mant_drop), _mm256_sub_epi32(Set(min_normal_e + mant_drop), e));
  return _mm256_and_si256(Ge(e, Set(min_sub_e)), ShiftRightRne(v, s));
}

// The fp32 bits of a finite magnitude with exponent field qe and mantissa field qm of
// such a format: normal, or for qe == 0 the subnormal qm * 2^(min_normal_e - 150 + mant_drop).
__m256i WidenMagnitude(__m256i qe, __m256i qm, int min_normal_e, int mant_drop) {
  const __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(qe, Set(min_normal_e - 1)), 23),
                                         _mm256_sllv_epi32(qm, Set(mant_drop)));
  const __m256 unit = _mm256_castsi256_ps(Set((min_normal_e - 23 + mant_drop) << 23));
  const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(qm), unit);
  return Select(Eq(qe, _mm256_setzero_si256()), normal, _mm256_castps_si256(subnormal));
}

Quantized F16(__m256 m) {
  // F32ToF16: the rounded magnitude, then overflow to Inf and NaN (quiet, top payload).
  const __m256i x = _mm256_castps_si256(m);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 16), Set(0x8000));
  const __m256i ax = _mm256_and_si256(x, Set(0x7FFFFFFF));
  __m256i h = RoundMagnitude(ax, 113, 13, 102);
  h = Select(Ge(ax, Set(0x477FF000)), h, Set(0x7C00));
  h = Select(Gt(ax, Set(0x7F800000)), h,
             _mm256_or_si256(Set(0x7E00), _mm256_and_si256(_mm256_srli_epi32(ax, 13), Set(0x3FF))));
  const __m256i q = _mm256_or_si256(sign, h);
  // F16UlpLog2: max(exponent, 1) - 25. F16ToF32: finite, or Inf/NaN with its payload.
  const __m256i he = _mm256_and_si256(_mm256_srli_epi32(q, 10), Set(0x1F));
  const __m256i hm = _mm256_and_si256(q, Set(0x3FF));
  __m256i value = WidenMagnitude(he, hm, 113, 13);
  value = Select(Eq(he, Set(0x1F)), value, _mm256_or_si256(Set(0x7F800000), _mm256_slli_epi32(hm, 13)));
  return {Ordinal16(q), _mm256_sub_epi32(_mm256_max_epi32(he, Set(1)), Set(25)),
          _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(sign, 16), value))};
}

Quantized Fp8(__m256 m) {
  // F32ToFp8E4M3: the rounded magnitude, saturating at 448 (0x7E), and NaN (0x7F).
  const __m256i x = _mm256_castps_si256(m);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 24), Set(0x80));
  const __m256i ax = _mm256_and_si256(x, Set(0x7FFFFFFF));
  __m256i b = _mm256_min_epi32(RoundMagnitude(ax, 121, 20, 117), Set(0x7E));
  b = Select(Gt(ax, Set(0x7F800000)), b, Set(0x7F));
  const __m256i q = _mm256_or_si256(sign, b);
  // Fp8Ordinal: negative values complement the 8 bits, others set the sign bit.
  const __m256i ordinal = _mm256_xor_si256(q, Select(Eq(sign, Set(0x80)), Set(0x80), Set(0xFF)));
  // Fp8UlpLog2: max(exponent, 1) - 10. Fp8E4M3ToF32: finite, or NaN.
  const __m256i qe = _mm256_and_si256(_mm256_srli_epi32(q, 3), Set(0xF));
  __m256i value = WidenMagnitude(qe, _mm256_and_si256(q, Set(0x7)), 121, 20);
  value = Select(Eq(b, Set(0x7F)), value, Set(0x7FC00000));
  return {ordinal, _mm256_sub_epi32(_mm256_max_epi32(qe, Set(1)), Set(10)),
          _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(sign, 24), value))};
}

// ScalarContext on every scalar, with the target conversion `quantize` (Bf16, F16 or Fp8
// above). For fp8 the prediction is first divided by the scale, as in
// spec_context_avx512.cc (a NaN prediction ends with the same outputs either way).
template <Quantized (*quantize)(__m256)>
void Contexts(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma, size_t row,
              uint16_t* pred_ordinal, uint16_t* table) {
  const __m256 log2_scale = _mm256_set1_ps(p.log2_scale), s_min = _mm256_set1_ps(p.s_min);
  const __m256 inv_step = _mm256_set1_ps(p.inv_step), frac_bins_f = _mm256_set1_ps(p.frac_bins_f);
  const __m256 fp8_scale = _mm256_set1_ps(p.fp8_scale);
  const __m256i bucket_max = Set(static_cast<int>(p.buckets - 1));
  const __m256i bin_max = Set(static_cast<int>(p.frac_bins - 1));
  const __m256i frac_bins = Set(static_cast<int>(p.frac_bins));
  const __m256i zero = _mm256_setzero_si256();
  const size_t vec_end = row - row % 8;
  for (size_t base = 0; base < n; base += row) {
    for (size_t j = 0; j < vec_end; j += 8) {
      _mm_prefetch(reinterpret_cast<const char*>(mu + base + j + kPrefetchFloats), _MM_HINT_T0);
      __m256 m = _mm256_loadu_ps(mu + base + j);
      if (p.fp8) m = _mm256_div_ps(m, fp8_scale);
      const __m256 ls = _mm256_loadu_ps(log2_sigma + j);
      const Quantized q = quantize(m);
      const __m256i u = q.ulp_log2;
      // Bucket of the spread; a NaN spread takes bucket 0.
      const __m256 s = _mm256_sub_ps(_mm256_sub_ps(ls, log2_scale), _mm256_cvtepi32_ps(u));
      const __m256 sb = _mm256_mul_ps(_mm256_sub_ps(s, s_min), inv_step);
      const __m256i ordered = _mm256_castps_si256(_mm256_cmp_ps(sb, sb, _CMP_ORD_Q));
      const __m256 sb_clamped = _mm256_min_ps(_mm256_max_ps(sb, _mm256_set1_ps(-1.0f)), _mm256_set1_ps(1e6f));
      const __m256i bucket = _mm256_and_si256(ordered, Floor(sb_clamped));
      // Sub-ulp offset f = (m - pv) * 2^-u (0 where 2^-u is out of range), 0 unless in [-1/2, 1/2].
      const __m256i in_range =
          _mm256_andnot_si256(_mm256_or_si256(Lt(u, Set(-126)), Gt(u, Set(126))), Set(-1));
      const __m256 inv_ulp = _mm256_castsi256_ps(
          _mm256_and_si256(in_range, _mm256_slli_epi32(_mm256_sub_epi32(Set(127), u), 23)));
      const __m256 f0 = _mm256_mul_ps(_mm256_sub_ps(m, q.value), inv_ulp);
      const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(f0, _mm256_set1_ps(0.5f), _CMP_LE_OQ),
                                        _mm256_cmp_ps(f0, _mm256_set1_ps(-0.5f), _CMP_GE_OQ));
      const __m256 f = _mm256_and_ps(keep, f0);
      const __m256i bin = Floor(_mm256_mul_ps(_mm256_add_ps(f, _mm256_set1_ps(0.5f)), frac_bins_f));
      const __m256i t = _mm256_add_epi32(
          _mm256_mullo_epi32(_mm256_min_epi32(_mm256_max_epi32(bucket, zero), bucket_max), frac_bins),
          _mm256_min_epi32(_mm256_max_epi32(bin, zero), bin_max));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pred_ordinal + base + j), Narrow(q.ordinal));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(table + base + j), Narrow(t));
    }
    for (size_t j = vec_end; j < row; ++j) {
      ScalarContext(p, mu[base + j], log2_sigma[j], &pred_ordinal[base + j], &table[base + j]);
    }
  }
}

}  // namespace

void ContextsAvx2(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma, size_t row,
                  uint16_t* pred_ordinal, uint16_t* table) {
  if (p.fp8) {
    Contexts<Fp8>(p, mu, n, log2_sigma, row, pred_ordinal, table);
  } else if (p.f16) {
    Contexts<F16>(p, mu, n, log2_sigma, row, pred_ordinal, table);
  } else {
    Contexts<Bf16>(p, mu, n, log2_sigma, row, pred_ordinal, table);
  }
}

}  // namespace kvstash::spec::internal
