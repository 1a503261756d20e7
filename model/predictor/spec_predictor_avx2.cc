#include "model/predictor/spec_predictor_avx2.h"

#include <immintrin.h>

#include <algorithm>

#include "numerics/det_math.h"

#define KVSTASH_AVX2 __attribute__((target("avx2")))

namespace kvstash::model::avx2 {
namespace {

using spec::DAdd;
using spec::DDiv;
using spec::DMul;
using spec::DSub;

// spec::DetExp on 8 lanes (same constants, same operation order).
KVSTASH_AVX2 inline __m256 DetExp8(__m256 x) {
  // n = FloorToInt(x * log2(e) + 0.5): truncate, then subtract 1 where float(t) > y.
  const __m256 y = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269502162933349609375f)),
                                 _mm256_set1_ps(0.5f));
  const __m256i t = _mm256_cvttps_epi32(y);
  const __m256i n = _mm256_add_epi32(
      t, _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(t), y, _CMP_GT_OQ)));  // -1 where true
  const __m256 fn = _mm256_cvtepi32_ps(n);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(fn, _mm256_set1_ps(0.693359375f))),
                                 _mm256_mul_ps(fn, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.98412698e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.38888889e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.33333333e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.16666667e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.66666667e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0.5f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
  // n1 = n / 2 truncating toward zero (C++ integer division), n2 = n - n1.
  const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(n, _mm256_srli_epi32(n, 31)), 1);
  const __m256i n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, p1), p2);
  // The scalar early returns, last one first so the first one wins.
  res = _mm256_blendv_ps(res, _mm256_setzero_ps(),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654022216796875f), _CMP_LT_OQ));
  res = _mm256_blendv_ps(res, _mm256_castsi256_ps(_mm256_set1_epi32(0x7F800000)),
                         _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ));
  return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Per key k_j (j < 8): the canonical tree of acc[j]'s lanes, as one vector [j0..j7].
KVSTASH_AVX2 inline __m256 ReduceTree8(const __m256 (&acc)[8]) {
  // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]; two levels give
  // per key (s0+s1)+(s2+s3) in the low half and (s4+s5)+(s6+s7) in the high half.
  const __m256 h01 = _mm256_hadd_ps(acc[0], acc[1]), h23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 h45 = _mm256_hadd_ps(acc[4], acc[5]), h67 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 a = _mm256_hadd_ps(h01, h23);  // keys 0-3: [lo0..lo3 | hi0..hi3]
  const __m256 b = _mm256_hadd_ps(h45, h67);  // keys 4-7
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// Scores of one query against 8 consecutive keys (hd a multiple of 8).
KVSTASH_AVX2 inline __m256 Dot8Keys(const float* q, const float* k, size_t stride, uint32_t hd) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (uint32_t d = 0; d < hd; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(qv, _mm256_loadu_ps(k + j * stride + d)));
    }
  }
  return ReduceTree8(acc);
}

// The softmax sums of R heads: each strictly sequential over keys, interleaved so the
// R dependency chains overlap.
template <int R>
KVSTASH_AVX2 void SequentialSums(const float* e, size_t row_stride, uint32_t n, float* sums) {
  float s[R];
  for (int r = 0; r < R; ++r) s[r] = 0.0f;
  for (uint32_t j = 0; j < n; ++j) {
    for (int r = 0; r < R; ++r) s[r] = DAdd(s[r], e[r * row_stride + j]);
  }
  for (int r = 0; r < R; ++r) sums[r] = s[r];
}

// out[d] += sum over increasing j in [j0, j1) of p[j] * v_j[d] (out = 0 first when
// j0 == 0), HD8 vectors kept in registers.
template <int HD8>
KVSTASH_AVX2 void WeightedSumFixed(const float* p, const float* v, size_t stride, uint32_t j0,
                                   uint32_t j1, float* out) {
  __m256 o[HD8];
  for (int d = 0; d < HD8; ++d) o[d] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + 8 * d);
  for (uint32_t j = j0; j < j1; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const float* vv = v + j * stride;
#pragma GCC unroll 16
    for (int d = 0; d < HD8; ++d) o[d] = _mm256_add_ps(o[d], _mm256_mul_ps(pj, _mm256_loadu_ps(vv + 8 * d)));
  }
  for (int d = 0; d < HD8; ++d) _mm256_storeu_ps(out + 8 * d, o[d]);
}

KVSTASH_AVX2 void WeightedSum(const float* p, const float* v, size_t stride, uint32_t j0, uint32_t j1,
                              uint32_t hd, float* out) {
  if (hd == 64) return WeightedSumFixed<8>(p, v, stride, j0, j1, out);
  if (hd == 128) return WeightedSumFixed<16>(p, v, stride, j0, j1, out);
  if (j0 == 0) {
    for (uint32_t d = 0; d < hd; ++d) out[d] = 0.0f;
  }
  for (uint32_t j = j0; j < j1; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const float* vv = v + j * stride;
    uint32_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_loadu_ps(out + d), _mm256_mul_ps(pj, _mm256_loadu_ps(vv + d))));
    }
    for (; d < hd; ++d) out[d] = DAdd(out[d], DMul(p[j], vv[d]));
  }
}

}  // namespace

KVSTASH_AVX2 void DetExp(const float* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, DetExp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = spec::DetExp(x[i]);
}

KVSTASH_AVX2 void SiluMul(float* gate, const float* up, size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    // DetSilu(x) = x / (1 + DetExp(-x)); negation is exact (sign flip).
    const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, DetExp8(_mm256_xor_ps(x, sign))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = DMul(spec::DetSilu(gate[i]), up[i]);
}

KVSTASH_AVX2 float CanonicalDot(const float* a, const float* b, uint32_t n) {
  __m256 acc = _mm256_setzero_ps();
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  alignas(32) float s[8];
  _mm256_store_ps(s, acc);
  for (; i < n; ++i) s[i & 7] = DAdd(s[i & 7], DMul(a[i], b[i]));
  return DAdd(DAdd(DAdd(s[0], s[1]), DAdd(s[2], s[3])), DAdd(DAdd(s[4], s[5]), DAdd(s[6], s[7])));
}

KVSTASH_AVX2 void AttentionTile(const float* q, size_t q_token_stride, uint32_t tokens, uint32_t heads,
                                const float* k, const float* v, size_t stride, uint32_t n0, uint32_t hd,
                                float scale, float* scratch, float* out, size_t out_token_stride) {
  if (tokens == 0 || heads == 0) return;
  const uint32_t rows = tokens * heads;
  const uint32_t n_max = n0 + tokens - 1;
  const size_t row_stride = static_cast<size_t>(n_max) + 8;
  auto q_row = [&](uint32_t r) { return q + (r / heads) * q_token_stride + (r % heads) * static_cast<size_t>(hd); };
  auto out_row = [&](uint32_t r) { return out + (r / heads) * out_token_stride + (r % heads) * static_cast<size_t>(hd); };
  auto keys = [&](uint32_t r) { return n0 + r / heads; };
  // Keys a row scores 8 at a time (hd a multiple of 8); the rest one at a time.
  auto blocked = [&](uint32_t r) { return hd % 8 == 0 ? keys(r) / 8 * 8 : 0u; };
  const __m256 vscale = _mm256_set1_ps(scale);
  // 1. Scores, key block outermost so the block stays in L1 for every row.
  for (uint32_t j = 0; j + 8 <= n_max; j += 8) {
    for (uint32_t r = 0; r < rows; ++r) {
      if (j + 8 > blocked(r)) continue;
      _mm256_storeu_ps(scratch + r * row_stride + j,
                       _mm256_mul_ps(Dot8Keys(q_row(r), k + j * stride, stride, hd), vscale));
    }
  }
  for (uint32_t r = 0; r < rows; ++r) {
    float* s = scratch + r * row_stride;
    const uint32_t n = keys(r), full = blocked(r);
    for (uint32_t j = full; j < n; ++j) s[j] = DMul(CanonicalDot(q_row(r), k + j * stride, hd), scale);
    // 2. The max (any order gives the same softmax bits: only the sign of a zero max
    // could differ, and x - (+-0) and DetExp(+-0) do not depend on it), then e_j.
    __m256 vmax = _mm256_set1_ps(-3.40282347e38f);
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(_mm256_loadu_ps(s + j), vmax);  // NaN never wins
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float m = -3.40282347e38f;
    for (float l : lanes) m = l > m ? l : m;
    for (; j < n; ++j) m = s[j] > m ? s[j] : m;
    const __m256 vm = _mm256_set1_ps(m);
    for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, DetExp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)));
    for (; j < n; ++j) s[j] = spec::DetExp(DSub(s[j], m));
  }
  // 3. Sequential sums (rows of one token have the same key count; 4 interleaved), then
  // p_j = e_j / sum.
  float sums[4];
  for (uint32_t r0 = 0; r0 < rows;) {
    uint32_t cnt = 1;
    while (cnt < 4 && r0 + cnt < rows && keys(r0 + cnt) == keys(r0)) ++cnt;
    const float* e = scratch + r0 * row_stride;
    const uint32_t n = keys(r0);
    switch (cnt) {
      case 1: SequentialSums<1>(e, row_stride, n, sums); break;
      case 2: SequentialSums<2>(e, row_stride, n, sums); break;
      case 3: SequentialSums<3>(e, row_stride, n, sums); break;
      default: SequentialSums<4>(e, row_stride, n, sums); break;
    }
    for (uint32_t r = r0; r < r0 + cnt; ++r) {
      float* s = scratch + r * row_stride;
      const float sum = sums[r - r0];
      const __m256 vsum = _mm256_set1_ps(sum);
      uint32_t j = 0;
      for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, _mm256_div_ps(_mm256_loadu_ps(s + j), vsum));
      for (; j < n; ++j) s[j] = DDiv(s[j], sum);
    }
    r0 += cnt;
  }
  // 4. out = sum_j p_j v_j, in key blocks that stay in L1 for every row; each row still
  // accumulates its keys in increasing order.
  constexpr uint32_t kKeyBlock = 64;
  for (uint32_t j0 = 0; j0 < n_max + 1; j0 += kKeyBlock) {
    for (uint32_t r = 0; r < rows; ++r) {
      const uint32_t n = keys(r);
      if (j0 >= n) continue;
      WeightedSum(scratch + r * row_stride, v, stride, j0, std::min(n, j0 + kKeyBlock), hd, out_row(r));
    }
  }
}

}  // namespace kvstash::model::avx2
