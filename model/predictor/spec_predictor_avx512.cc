// AVX-512 attention tile and SiLU of the spec predictor: the header states the layout
// (two query rows per zmm) and the exactness argument. Built with the AVX-512 F/BW/DQ/VL
// flags for this file only (model/predictor/CMakeLists.txt); entered only after
// spec::CpuHasAvx512().
// GCC 12 reports its own _mm512_undefined_ps() (inside conversions and extracts) as
// maybe uninitialised: a known false positive of the header, silenced for this file (GCC only).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "model/predictor/spec_predictor_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "model/predictor/spec_predictor_avx2.h"
#include "numerics/det_math.h"
#include "numerics/spec_predictor_ops.h"

namespace kvstash::model::avx512 {
namespace {

using spec::DAdd;
using spec::DDiv;
using spec::DMul;
using spec::DSub;

// spec::DetExp on 16 lanes (the AVX2 DetExp8's operations, masks for its blends).
inline __m512 DetExp16(__m512 x) {
  // n = FloorToInt(x * log2(e) + 0.5): truncate, then subtract 1 where float(t) > y.
  const __m512 y = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269502162933349609375f)),
                                 _mm512_set1_ps(0.5f));
  const __m512i t = _mm512_cvttps_epi32(y);
  const __mmask16 gt = _mm512_cmp_ps_mask(_mm512_cvtepi32_ps(t), y, _CMP_GT_OQ);
  const __m512i n = _mm512_mask_sub_epi32(t, gt, t, _mm512_set1_epi32(1));
  const __m512 fn = _mm512_cvtepi32_ps(n);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(fn, _mm512_set1_ps(0.693359375f))),
                                 _mm512_mul_ps(fn, _mm512_set1_ps(-2.12194440e-4f)));
  __m512 p = _mm512_set1_ps(1.98412698e-4f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.38888889e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.33333333e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.16666667e-2f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.66666667e-1f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
  // n1 = n / 2 truncating toward zero (C++ integer division), n2 = n - n1.
  const __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(n, _mm512_srli_epi32(n, 31)), 1);
  const __m512i n2 = _mm512_sub_epi32(n, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __m512 res = _mm512_mul_ps(_mm512_mul_ps(p, p1), p2);
  // The scalar early returns, last one first so the first one wins.
  res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654022216796875f), _CMP_LT_OQ),
                           _mm512_setzero_ps());
  res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283935546875f), _CMP_GT_OQ),
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x7F800000)));
  return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// max of s[0..n) (order-free: any order gives the same value, NaN never wins; the
// softmax bits do not depend on the sign of a zero max either: x - (+-0) and
// DetExp(+-0) do not).
inline float RowMax(const float* s, uint32_t n) {
  __m512 vmax = _mm512_set1_ps(-3.40282347e38f);
  uint32_t j = 0;
  for (; j + 16 <= n; j += 16) vmax = _mm512_max_ps(_mm512_loadu_ps(s + j), vmax);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, vmax);
  float m = -3.40282347e38f;
  for (float l : lanes) m = l > m ? l : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

// Per half (row) and key j < 8: the canonical tree of acc[j]'s 8 lanes of that half.
// Returns [row a: keys 0-7 | row b: keys 0-7].
inline __m512 ReduceTree8x2(const __m512 (&acc)[8]) {
  // Even lanes + odd lanes of (x, y): per 128-bit group [x0+x1, x2+x3, y0+y1, y2+y3],
  // vhaddps's result and operand order.
  auto hadd = [](__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
  };
  const __m512 h01 = hadd(acc[0], acc[1]), h23 = hadd(acc[2], acc[3]);
  const __m512 h45 = hadd(acc[4], acc[5]), h67 = hadd(acc[6], acc[7]);
  // Groups: [a keys 0-3 lo | a keys 0-3 hi | b keys 0-3 lo | b keys 0-3 hi], lo =
  // (s0+s1)+(s2+s3), hi = (s4+s5)+(s6+s7).
  const __m512 c0 = hadd(h01, h23), c1 = hadd(h45, h67);
  const __m512 lo = _mm512_shuffle_f32x4(c0, c1, 0x88);  // [c0.g0, c0.g2, c1.g0, c1.g2]
  const __m512 hi = _mm512_shuffle_f32x4(c0, c1, 0xDD);  // [c0.g1, c0.g3, c1.g1, c1.g3]
  const __m512 sum = _mm512_add_ps(lo, hi);               // [a 0-3, b 0-3, a 4-7, b 4-7]
  return _mm512_shuffle_f32x4(sum, sum, 0xD8);            // [a 0-3, a 4-7, b 0-3, b 4-7]
}

// Scores of two query rows (their q chunks in q2[hd / 8][16], row a low, row b high)
// against 8 consecutive keys, hd a multiple of 8.
template <uint32_t HD8>
inline __m512 Dot8KeysTwoRows(const float* q2, const float* k, size_t stride, uint32_t hd8) {
  __m512 acc[8];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const uint32_t chunks = HD8 != 0 ? HD8 : hd8;
#pragma GCC unroll 16
  for (uint32_t c = 0; c < chunks; ++c) {
    const __m512 qv = _mm512_loadu_ps(q2 + 16 * c);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512 kv = _mm512_broadcast_f32x8(_mm256_loadu_ps(k + j * stride + 8 * c));
      acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(qv, kv));
    }
  }
  return ReduceTree8x2(acc);
}

// The softmax sums of R consecutive rows (keys n[0] <= n[1] <= ...): each row's sum
// strictly sequential over its keys, the R dependency chains interleaved over the keys
// all rows see, then each longer row's own tail in order. Named scalars (an array here
// stays in memory and chains every add through a store and a load).
template <int R>
void SequentialSums(const float* e, size_t row_stride, const uint32_t* n, float* sums) {
  static_assert(R >= 1 && R <= 8);
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, s4 = 0.0f, s5 = 0.0f, s6 = 0.0f, s7 = 0.0f;
  const float* e0 = e;
  const float* e1 = e + row_stride * (R > 1 ? 1 : 0);
  const float* e2 = e + row_stride * (R > 2 ? 2 : 0);
  const float* e3 = e + row_stride * (R > 3 ? 3 : 0);
  const float* e4 = e + row_stride * (R > 4 ? 4 : 0);
  const float* e5 = e + row_stride * (R > 5 ? 5 : 0);
  const float* e6 = e + row_stride * (R > 6 ? 6 : 0);
  const float* e7 = e + row_stride * (R > 7 ? 7 : 0);
  const uint32_t common = n[0];
  for (uint32_t j = 0; j < common; ++j) {
    s0 = DAdd(s0, e0[j]);
    if constexpr (R > 1) s1 = DAdd(s1, e1[j]);
    if constexpr (R > 2) s2 = DAdd(s2, e2[j]);
    if constexpr (R > 3) s3 = DAdd(s3, e3[j]);
    if constexpr (R > 4) s4 = DAdd(s4, e4[j]);
    if constexpr (R > 5) s5 = DAdd(s5, e5[j]);
    if constexpr (R > 6) s6 = DAdd(s6, e6[j]);
    if constexpr (R > 7) s7 = DAdd(s7, e7[j]);
  }
  float s[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
  for (int r = 1; r < R; ++r) {
    const float* er = e + row_stride * r;
    float t = s[r];
    for (uint32_t j = common; j < n[r]; ++j) t = DAdd(t, er[j]);
    s[r] = t;
  }
  for (int r = 0; r < R; ++r) sums[r] = s[r];
}

// For each of NR rows (1 or 2): out[d] = out[d] + p[j] * v_j[d] over increasing j in
// [j0, j1) (out = 0 first when j0 == 0), HD16 zmm per row kept in registers.
template <int HD16, int NR>
void WeightedSumFixed(const float* const (&p)[2], const float* v, size_t stride, uint32_t j0, uint32_t j1,
                      float* const (&out)[2]) {
  __m512 o[NR][HD16];
  for (int r = 0; r < NR; ++r) {
    for (int d = 0; d < HD16; ++d) o[r][d] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out[r] + 16 * d);
  }
  for (uint32_t j = j0; j < j1; ++j) {
    const float* vv = v + j * stride;
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const __m512 pj = _mm512_set1_ps(p[r][j]);
#pragma GCC unroll 16
      for (int d = 0; d < HD16; ++d) {
        o[r][d] = _mm512_add_ps(o[r][d], _mm512_mul_ps(pj, _mm512_loadu_ps(vv + 16 * d)));
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int d = 0; d < HD16; ++d) _mm512_storeu_ps(out[r] + 16 * d, o[r][d]);
  }
}

// One row, any hd: 16 lanes at a time, then single lanes (each d its own sum).
void WeightedSumAny(const float* p, const float* v, size_t stride, uint32_t j0, uint32_t j1, uint32_t hd,
                    float* out) {
  if (j0 == 0) {
    for (uint32_t d = 0; d < hd; ++d) out[d] = 0.0f;
  }
  for (uint32_t j = j0; j < j1; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    const float* vv = v + j * stride;
    uint32_t d = 0;
    for (; d + 16 <= hd; d += 16) {
      _mm512_storeu_ps(out + d, _mm512_add_ps(_mm512_loadu_ps(out + d), _mm512_mul_ps(pj, _mm512_loadu_ps(vv + d))));
    }
    for (; d < hd; ++d) out[d] = DAdd(out[d], DMul(p[j], vv[d]));
  }
}

// Rows a and b (b == nullptr: a alone) over [j0, j1), the same j range for both.
void WeightedSum(const float* pa, const float* pb, const float* v, size_t stride, uint32_t j0, uint32_t j1,
                 uint32_t hd, float* oa, float* ob) {
  if (j0 >= j1) return;
  const float* const p[2] = {pa, pb};
  float* const o[2] = {oa, ob};
  if (hd == 64) {
    return pb ? WeightedSumFixed<4, 2>(p, v, stride, j0, j1, o) : WeightedSumFixed<4, 1>(p, v, stride, j0, j1, o);
  }
  if (hd == 128) {
    return pb ? WeightedSumFixed<8, 2>(p, v, stride, j0, j1, o) : WeightedSumFixed<8, 1>(p, v, stride, j0, j1, o);
  }
  WeightedSumAny(pa, v, stride, j0, j1, hd, oa);
  if (pb) WeightedSumAny(pb, v, stride, j0, j1, hd, ob);
}

}  // namespace

void DetExp(const float* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, DetExp16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = spec::DetExp(x[i]);
}

float ExpSumWeights(float* s, uint32_t n, const float* v_scale, float* w) {
  const __m512 vm = _mm512_set1_ps(RowMax(s, n));
  __m512 acc = _mm512_setzero_ps();
  for (uint32_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    const __m512 e = DetExp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm));
    _mm512_mask_storeu_ps(s + j, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
    _mm512_mask_storeu_ps(w + j, k, _mm512_mul_ps(e, _mm512_maskz_loadu_ps(k, v_scale + j)));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  return Tree16(lanes);
}

void SiluMul(float* gate, const float* up, size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(gate + i);
    // DetSilu(x) = x / (1 + DetExp(-x)); negation is exact (sign flip).
    const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, DetExp16(_mm512_xor_ps(x, sign))));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = DMul(spec::DetSilu(gate[i]), up[i]);
}

void AttentionTile(const float* q, size_t q_token_stride, uint32_t tokens, uint32_t heads, const float* k,
                   const float* v, size_t stride, uint32_t n0, uint32_t hd, float scale, float* scratch,
                   float* out, size_t out_token_stride) {
  if (tokens == 0 || heads == 0) return;
  const uint32_t rows = tokens * heads;
  const uint32_t n_max = n0 + tokens - 1;
  const size_t row_stride = static_cast<size_t>(n_max) + 8;
  auto q_row = [&](uint32_t r) { return q + (r / heads) * q_token_stride + (r % heads) * static_cast<size_t>(hd); };
  auto out_row = [&](uint32_t r) { return out + (r / heads) * out_token_stride + (r % heads) * static_cast<size_t>(hd); };
  auto keys = [&](uint32_t r) { return n0 + r / heads; };  // non-decreasing in r
  // Keys a row scores 8 at a time (hd a multiple of 8); the rest one at a time.
  auto blocked = [&](uint32_t r) { return hd % 8 == 0 ? keys(r) / 8 * 8 : 0u; };
  const __m512 vscale = _mm512_set1_ps(scale);
  // 1. Scores, key block outermost so the block stays in L1 for every row. Rows go in
  // pairs (r, r+1) = (a, b), b == a when rows is odd; q2 holds each pair's q chunks.
  const uint32_t pairs = (rows + 1) / 2, hd8 = hd / 8;
  if (hd % 8 == 0) {
    std::vector<float> q2(static_cast<size_t>(pairs) * hd8 * 16);
    for (uint32_t pi = 0; pi < pairs; ++pi) {
      const float* qa = q_row(2 * pi);
      const float* qb = q_row(std::min(2 * pi + 1, rows - 1));
      for (uint32_t c = 0; c < hd8; ++c) {
        _mm512_storeu_ps(q2.data() + (static_cast<size_t>(pi) * hd8 + c) * 16,
                         _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(qa + 8 * c)),
                                            _mm256_loadu_ps(qb + 8 * c), 1));
      }
    }
    for (uint32_t j = 0; j + 8 <= n_max; j += 8) {
      for (uint32_t pi = 0; pi < pairs; ++pi) {
        const uint32_t a = 2 * pi, b = std::min(a + 1, rows - 1);
        if (j + 8 > blocked(b)) continue;  // blocked(a) <= blocked(b)
        const float* qp = q2.data() + static_cast<size_t>(pi) * hd8 * 16;
        const __m512 s = _mm512_mul_ps(hd == 64    ? Dot8KeysTwoRows<8>(qp, k + j * stride, stride, hd8)
                                       : hd == 128 ? Dot8KeysTwoRows<16>(qp, k + j * stride, stride, hd8)
                                                   : Dot8KeysTwoRows<0>(qp, k + j * stride, stride, hd8),
                                       vscale);
        if (j + 8 <= blocked(a)) _mm256_storeu_ps(scratch + a * row_stride + j, _mm512_castps512_ps256(s));
        if (b != a) _mm256_storeu_ps(scratch + b * row_stride + j, _mm512_extractf32x8_ps(s, 1));
      }
    }
  }
  for (uint32_t r = 0; r < rows; ++r) {
    float* s = scratch + r * row_stride;
    const uint32_t n = keys(r), full = blocked(r);
    for (uint32_t j = full; j < n; ++j) s[j] = DMul(avx2::CanonicalDot(q_row(r), k + j * stride, hd), scale);
    // 2. The max (any order gives the same softmax bits: only the sign of a zero max
    // could differ, and x - (+-0) and DetExp(+-0) do not depend on it), then e_j.
    const float m = RowMax(s, n);
    const __m512 vm = _mm512_set1_ps(m);
    uint32_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(s + j, DetExp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm)));
    for (; j < n; ++j) s[j] = spec::DetExp(DSub(s[j], m));
  }
  // 3. Sequential sums (up to 8 consecutive rows interleaved), then p_j = e_j / sum.
  for (uint32_t r0 = 0; r0 < rows; r0 += 8) {
    const uint32_t cnt = std::min(8u, rows - r0);
    uint32_t n[8];
    float sums[8];
    for (uint32_t i = 0; i < cnt; ++i) n[i] = keys(r0 + i);
    const float* e = scratch + r0 * row_stride;
    switch (cnt) {
      case 1: SequentialSums<1>(e, row_stride, n, sums); break;
      case 2: SequentialSums<2>(e, row_stride, n, sums); break;
      case 3: SequentialSums<3>(e, row_stride, n, sums); break;
      case 4: SequentialSums<4>(e, row_stride, n, sums); break;
      case 5: SequentialSums<5>(e, row_stride, n, sums); break;
      case 6: SequentialSums<6>(e, row_stride, n, sums); break;
      case 7: SequentialSums<7>(e, row_stride, n, sums); break;
      default: SequentialSums<8>(e, row_stride, n, sums); break;
    }
    for (uint32_t i = 0; i < cnt; ++i) {
      float* s = scratch + (r0 + i) * row_stride;
      const __m512 vsum = _mm512_set1_ps(sums[i]);
      uint32_t j = 0;
      for (; j + 16 <= n[i]; j += 16) _mm512_storeu_ps(s + j, _mm512_div_ps(_mm512_loadu_ps(s + j), vsum));
      for (; j < n[i]; ++j) s[j] = DDiv(s[j], sums[i]);
    }
  }
  // 4. out = sum_j p_j v_j, in key blocks that stay in L1 for every row; rows in pairs
  // over the keys both see, then the longer row alone; each row accumulates its own
  // keys in increasing order.
  constexpr uint32_t kKeyBlock = 64;
  for (uint32_t j0 = 0; j0 < n_max + 1; j0 += kKeyBlock) {
    for (uint32_t a = 0; a < rows; a += 2) {
      const uint32_t ea = std::min(keys(a), j0 + kKeyBlock);
      const float* pa = scratch + a * row_stride;
      if (a + 1 == rows) {
        WeightedSum(pa, nullptr, v, stride, j0, ea, hd, out_row(a), nullptr);
        continue;
      }
      const uint32_t b = a + 1, eb = std::min(keys(b), j0 + kKeyBlock);  // ea <= eb
      const float* pb = scratch + b * row_stride;
      WeightedSum(pa, pb, v, stride, j0, ea, hd, out_row(a), out_row(b));
      WeightedSum(pb, nullptr, v, stride, std::max(j0, ea), eb, hd, out_row(b), nullptr);
    }
  }
}

}  // namespace kvstash::model::avx512
