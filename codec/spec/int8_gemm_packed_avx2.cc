// AVX2 kernels of codec/spec/int8_gemm_packed.h (built with -mavx2, without -mfma;
// entered only after a run-time CPU check). The header has the layouts and the
// exactness argument.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "codec/spec/int8_gemm_packed.h"

namespace kvstash::spec::internal {
namespace {

constexpr int kMaxRows = 6;  // tokens per micro-kernel: 12 int32 accumulators + 3 operands

// acc[r][h] += A[r] (pairs p) x W (block of 16 channels), over `pairs` channel pairs.
// A row r starts at a + r * lda; w points at the group's first pair (32 bytes a pair).
template <int MR>
inline void MicroKernel(const int16_t* a, size_t lda, const int8_t* w, int pairs,
                        __m256i (&acc)[MR][2]) {
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int p = 0; p < pairs; ++p) {
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * p)));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * p + 16)));
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof(pair));
      const __m256i av = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, w0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, w1));
    }
  }
}

// MR rows x one 16-channel block, every group in ascending order, into tile [MR][16].
template <int MR>
void RowBlock(const PackedActivations& a, const PackedWeights& b, int row, int blk, float* tile) {
  const PackedShape& s = b.shape;
  const size_t lda = static_cast<size_t>(s.stride());
  const int np = b.blocks * kPackedBlock;
  const int16_t* arow = a.q.data() + static_cast<size_t>(row) * lda;
  const int8_t* panel = b.data.data() + static_cast<size_t>(blk) * s.pairs * 2 * kPackedBlock;
  __m256 o[MR][2];
  for (int r = 0; r < MR; ++r) o[r][0] = o[r][1] = _mm256_setzero_ps();
  for (int g = 0; g < s.groups; ++g) {
    __m256i acc[MR][2];
    const int p0 = g * s.group_pairs;
    MicroKernel<MR>(arow + 2 * p0, lda, panel + 32 * static_cast<size_t>(p0), s.PairsOf(g), acc);
    const float* sb = b.scales.data() + static_cast<size_t>(g) * np + blk * kPackedBlock;
    const __m256 sb0 = _mm256_loadu_ps(sb), sb1 = _mm256_loadu_ps(sb + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 sa = _mm256_set1_ps(a.scales[static_cast<size_t>(row + r) * s.groups + g]);
      // o = o + float(dot) * (sa * sb): the reference's three roundings, in its order.
      o[r][0] = _mm256_add_ps(o[r][0], _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][0]), _mm256_mul_ps(sa, sb0)));
      o[r][1] = _mm256_add_ps(o[r][1], _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][1]), _mm256_mul_ps(sa, sb1)));
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_ps(tile + r * kPackedBlock, o[r][0]);
    _mm256_storeu_ps(tile + r * kPackedBlock + 8, o[r][1]);
  }
}

using RowBlockFn = void (*)(const PackedActivations&, const PackedWeights&, int, int, float*);
constexpr RowBlockFn kRowBlock[kMaxRows + 1] = {nullptr,      RowBlock<1>, RowBlock<2>, RowBlock<3>,
                                                RowBlock<4>, RowBlock<5>, RowBlock<6>};

}  // namespace

void GemmPackedAvx2(const PackedActivations& a, const PackedWeights& b, float* out,
                    int block_begin, int block_end) {
  // Tokens per tile: its activations (~128 KiB) stay in L2 while every channel block
  // of this thread passes over them; each block's weight panel stays in L1.
  const int row_bytes = 2 * b.shape.stride();
  const int tile_rows = std::max(kMaxRows, (131072 / std::max(row_bytes, 1)) / kMaxRows * kMaxRows);
  alignas(32) float tile[kMaxRows * kPackedBlock];
  for (int i0 = 0; i0 < a.m; i0 += tile_rows) {
    const int i1 = std::min(a.m, i0 + tile_rows);
    for (int blk = block_begin; blk < block_end; ++blk) {
      const int j0 = blk * kPackedBlock, cols = std::min(kPackedBlock, b.n - j0);
      for (int i = i0; i < i1; i += kMaxRows) {
        const int rows = std::min(kMaxRows, i1 - i);
        kRowBlock[rows](a, b, i, blk, tile);
        for (int r = 0; r < rows; ++r) {
          std::memcpy(out + static_cast<size_t>(i + r) * b.n + j0, tile + r * kPackedBlock,
                      sizeof(float) * cols);
        }
      }
    }
  }
}

bool QuantizeGroupAvx2(const float* x, int len, float qmax, int16_t* q, float* scale_out) {
  constexpr float kMaxFinite = 3.40282347e38f;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 max_finite = _mm256_set1_ps(kMaxFinite);
  __m256 vmax = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    // NaN and Inf never win (ordered compare: false for NaN).
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(a, _mm256_cmp_ps(a, max_finite, _CMP_LE_OQ)));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = 0.0f;
  for (float l : lanes) amax = l > amax ? l : amax;
  for (; i < len; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    if (a > amax && a <= kMaxFinite) amax = a;
  }
  const float scale = amax > 0.0f ? amax / qmax : 1.0f;
  if (scale == 0.0f) return false;
  const __m256 vs = _mm256_set1_ps(scale), vq = _mm256_set1_ps(qmax), vnq = _mm256_set1_ps(-qmax);
  const __m256 magic = _mm256_set1_ps(12582912.0f);  // RoundHalfEvenInline's 1.5 * 2^23
  i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 t = _mm256_div_ps(v, vs);
    t = _mm256_min_ps(_mm256_max_ps(t, vnq), vq);  // t is NaN only when v is (zeroed below)
    t = _mm256_sub_ps(_mm256_add_ps(t, magic), magic);
    __m256i r = _mm256_cvtps_epi32(t);  // integer-valued: exact
    r = _mm256_and_si256(r, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q)));
    const __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), packed);
  }
  for (; i < len; ++i) {
    const float v = x[i];
    int16_t r = 0;
    if (v == v) {
      float t = v / scale;
      t = t > qmax ? qmax : (t < -qmax ? -qmax : t);
      r = static_cast<int16_t>((t + 12582912.0f) - 12582912.0f);
    }
    q[i] = r;
  }
  *scale_out = scale;
  return true;
}

}  // namespace kvstash::spec::internal
