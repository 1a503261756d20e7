// AVX2 kernel of numerics/ggml_gemm.h (GgmlPath::kAvx2). Built with -mavx2 for
// this file only (model/predictor/CMakeLists.txt), entered only after
// spec::CpuHasAvx2(); no FMA (-ffp-contract=off, and -mfma is not given).
//
// A 16-row block is done as two halves of 8 rows, one ymm lane per row. At quad k of
// block b, 32 bytes of the packed 64 hold q_r[4k .. 4k+3] for the half's 8 rows
// (unsigned, 0..15); vpmaddubsw with the token's q8[4k .. 4k+3] (signed) broadcast to
// every 4-byte group gives per row two int16 pair sums, each |.| <= 2 * 15 * 127 =
// 3810, so the instruction never saturates. The eight quads' pair sums are added in
// int16 (|.| <= 8 * 3810 = 30480 < 2^15: exact), then vpmaddwd by 1 adds each row's
// two halves into one int32 lane: the block's sumi, exactly. Then, per lane and in the
// reference's order: acc = acc + (d4 * d8) * float(sumi); summs = summs + m4 * s8
// (vcvtdq2ps, vmulps, vmulps, vaddps, vmulps, vaddps: separate roundings, default
// MXCSR), and after the last block acc + summs. A register block is kTokens tokens
// (3 ymm each: the int16 sums, acc, summs) sharing each weight load; the token tail
// runs the same code with fewer tokens. Padding rows are computed, not stored.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "numerics/ggml_gemm.h"

namespace kvstash::model::ggml::internal {
namespace {

constexpr uint32_t kTokens = 4;  // tokens per register block: 12 ymm of state
constexpr uint32_t kHalf = kRowBlock / 2;

inline __m256i BroadcastQuad(const int8_t* p) {
  int32_t quad;
  std::memcpy(&quad, p, sizeof(quad));
  return _mm256_set1_epi32(quad);
}

// Rows [8 * half, 8 * half + 8) of one row block, tokens [t0, t0 + N).
template <uint32_t N>
void Tile(const PackedQ4_1& w, uint32_t row_block, uint32_t half, const BlockQ8_1* x, const float* xd,
          const float* xs, uint32_t t0, float* y, size_t y_stride) {
  const uint32_t blocks = w.blocks;
  const size_t tile0 = static_cast<size_t>(row_block) * blocks;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[N], summs[N];
#pragma GCC unroll 8
  for (uint32_t i = 0; i < N; ++i) acc[i] = summs[i] = _mm256_setzero_ps();
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint8_t* q = &w.q[(tile0 + b) * kPackedQuadBytes + half * kHalf * 4];
    __m256i sum16[N];
#pragma GCC unroll 8
    for (uint32_t i = 0; i < N; ++i) sum16[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (uint32_t k = 0; k < kBlock / 4; ++k) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + k * kRowBlock * 4));
#pragma GCC unroll 8
      for (uint32_t i = 0; i < N; ++i) {
        const __m256i xq = BroadcastQuad(x[(t0 + i) * static_cast<size_t>(blocks) + b].qs + 4 * k);
        sum16[i] = _mm256_add_epi16(sum16[i], _mm256_maddubs_epi16(wq, xq));
      }
    }
    const __m256 d4 = _mm256_loadu_ps(&w.d[(tile0 + b) * kRowBlock + half * kHalf]);
    const __m256 m4 = _mm256_loadu_ps(&w.m[(tile0 + b) * kRowBlock + half * kHalf]);
#pragma GCC unroll 8
    for (uint32_t i = 0; i < N; ++i) {
      const size_t xb = (t0 + i) * static_cast<size_t>(blocks) + b;
      const __m256i sumi = _mm256_madd_epi16(sum16[i], ones);
      const __m256 dd = _mm256_mul_ps(d4, _mm256_set1_ps(xd[xb]));
      acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)));
      summs[i] = _mm256_add_ps(summs[i], _mm256_mul_ps(m4, _mm256_set1_ps(xs[xb])));
    }
  }
  const uint32_t o0 = row_block * kRowBlock + half * kHalf;
  const uint32_t valid = std::min(kHalf, w.rows - o0);
#pragma GCC unroll 8
  for (uint32_t i = 0; i < N; ++i) {
    float* dst = y + (t0 + i) * y_stride + o0;
    const __m256 r = _mm256_add_ps(acc[i], summs[i]);
    if (valid == kHalf) {
      _mm256_storeu_ps(dst, r);
    } else {
      alignas(32) float lanes[kHalf];
      _mm256_store_ps(lanes, r);
      std::memcpy(dst, lanes, valid * sizeof(float));
    }
  }
}

void Half(const PackedQ4_1& w, uint32_t row_block, uint32_t half, const BlockQ8_1* x, const float* xd,
          const float* xs, uint32_t tokens, float* y, size_t y_stride) {
  uint32_t t = 0;
  for (; t + kTokens <= tokens; t += kTokens) Tile<kTokens>(w, row_block, half, x, xd, xs, t, y, y_stride);
  switch (tokens - t) {
    case 3:
      Tile<3>(w, row_block, half, x, xd, xs, t, y, y_stride);
      break;
    case 2:
      Tile<2>(w, row_block, half, x, xd, xs, t, y, y_stride);
      break;
    case 1:
      Tile<1>(w, row_block, half, x, xd, xs, t, y, y_stride);
      break;
    default:
      break;
  }
}

}  // namespace

void GemmRowBlockAvx2(const PackedQ4_1& w, uint32_t row_block, const BlockQ8_1* x, const float* xd,
                      const float* xs, uint32_t tokens, float* y, size_t y_stride) {
  Half(w, row_block, 0, x, xd, xs, tokens, y, y_stride);
  // A last block of 8 rows or fewer has no second half to store.
  if (row_block * kRowBlock + kHalf < w.rows) Half(w, row_block, 1, x, xd, xs, tokens, y, y_stride);
}

}  // namespace kvstash::model::ggml::internal
