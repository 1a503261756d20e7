// AVX2 kernels of numerics/int8_gemm_packed.h (built with -mavx2, without -mfma;
// entered only after a run-time CPU check). The header has the layouts and the
// exactness argument.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "numerics/int8_gemm_packed.h"

namespace kvstash::spec::internal {
namespace {

constexpr int kMaxRows = 6;  // tokens per micro-kernel: 12 int32 accumulators + 3 operands

// dots[r][0..15] = exact int32 sums of A row r (pairs [0, pairs)) with the block's 16
// channels. A row r starts at a + r * lda; w points at the group's first pair (32
// bytes a pair). Named accumulators (not an array) keep GCC from spilling them.
template <int MR>
inline void MicroKernel(const int16_t* a, size_t lda, const int8_t* w, int pairs,
                        int32_t (*dots)[kPackedBlock]) {
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const int16_t* a0 = a;
  const int16_t* a1 = a + lda * (MR > 1 ? 1 : 0);
  const int16_t* a2 = a + lda * (MR > 2 ? 2 : 0);
  const int16_t* a3 = a + lda * (MR > 3 ? 3 : 0);
  const int16_t* a4 = a + lda * (MR > 4 ? 4 : 0);
  const int16_t* a5 = a + lda * (MR > 5 ? 5 : 0);
  auto bcast = [](const int16_t* p) {
    int32_t pair;
    std::memcpy(&pair, p, sizeof(pair));
    return _mm256_set1_epi32(pair);
  };
  for (int p = 0; p < pairs; ++p) {
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * p)));
    const __m256i w1 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * p + 16)));
    __m256i x = bcast(a0 + 2 * p);
    c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(x, w0));
    c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(x, w1));
    if constexpr (MR > 1) {
      x = bcast(a1 + 2 * p);
      c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(x, w0));
      c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(x, w1));
    }
    if constexpr (MR > 2) {
      x = bcast(a2 + 2 * p);
      c20 = _mm256_add_epi32(c20, _mm256_madd_epi16(x, w0));
      c21 = _mm256_add_epi32(c21, _mm256_madd_epi16(x, w1));
    }
    if constexpr (MR > 3) {
      x = bcast(a3 + 2 * p);
      c30 = _mm256_add_epi32(c30, _mm256_madd_epi16(x, w0));
      c31 = _mm256_add_epi32(c31, _mm256_madd_epi16(x, w1));
    }
    if constexpr (MR > 4) {
      x = bcast(a4 + 2 * p);
      c40 = _mm256_add_epi32(c40, _mm256_madd_epi16(x, w0));
      c41 = _mm256_add_epi32(c41, _mm256_madd_epi16(x, w1));
    }
    if constexpr (MR > 5) {
      x = bcast(a5 + 2 * p);
      c50 = _mm256_add_epi32(c50, _mm256_madd_epi16(x, w0));
      c51 = _mm256_add_epi32(c51, _mm256_madd_epi16(x, w1));
    }
  }
  const __m256i c[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < MR; ++r) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dots[r]), c[r][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dots[r] + 8), c[r][1]);
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
  // The fp32 sums live in `tile` (L1) so that the 12 int32 accumulators, the two
  // weight vectors and the broadcast fit the 16 ymm registers without spills.
  for (int i = 0; i < MR * kPackedBlock; ++i) tile[i] = 0.0f;
  for (int g = 0; g < s.groups; ++g) {
    alignas(32) int32_t dots[MR][kPackedBlock];
    const int p0 = g * s.group_pairs;
    MicroKernel<MR>(arow + 2 * p0, lda, panel + 32 * static_cast<size_t>(p0), s.PairsOf(g), dots);
    const float* sb = b.scales.data() + static_cast<size_t>(g) * np + blk * kPackedBlock;
    const __m256 sb0 = _mm256_loadu_ps(sb), sb1 = _mm256_loadu_ps(sb + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 sa = _mm256_set1_ps(a.scales[static_cast<size_t>(row + r) * s.groups + g]);
      for (int h = 0; h < 2; ++h) {
        float* o = tile + r * kPackedBlock + 8 * h;
        const __m256 dot =
            _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dots[r] + 8 * h)));
        // o = o + float(dot) * (sa * sb): the reference's three roundings, in its order.
        const __m256 scale = _mm256_mul_ps(sa, h ? sb1 : sb0);
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(dot, scale)));
      }
    }
  }
}

using RowBlockFn = void (*)(const PackedActivations&, const PackedWeights&, int, int, float*);
constexpr RowBlockFn kRowBlock[kMaxRows + 1] = {nullptr,     RowBlock<1>, RowBlock<2>, RowBlock<3>,
                                                RowBlock<4>, RowBlock<5>, RowBlock<6>};

}  // namespace

void GemmPackedAvx2(const PackedActivations& a, const PackedWeights& b, float* out, int block_begin,
                    int block_end) {
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
