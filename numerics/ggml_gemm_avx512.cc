// AVX-512 VNNI kernel of numerics/ggml_gemm.h (GgmlPath::kAvx512). Built with
// -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni for this file only
// (model/predictor/CMakeLists.txt), entered only after spec::CpuHasAvx512().
//
// One zmm lane per weight row of a 16-row block. At quad k of block b, the 64-byte
// load holds q_r[4k .. 4k+3] for rows r = 0..15 (unsigned, 0..15); vpdpbusd with the
// token's q8[4k .. 4k+3] (signed) broadcast to every lane adds the four products to
// lane r. Eight vpdpbusd give lane r the block's sumi exactly: vpdpbusd is the
// non-saturating form and |sumi| <= 32 * 15 * 127 < 2^31. Then, per lane and in the
// reference's order: acc = acc + (d4 * d8) * float(sumi); summs = summs + m4 * s8
// (vcvtdq2ps, vmulps, vmulps, vaddps, vmulps, vaddps: separate roundings, default
// MXCSR; -ffp-contract=off keeps the compiler from fusing them although -mavx512f
// enables FMA), and after the last block acc + summs. A register block is kTokens
// tokens (3 zmm each: sumi, acc, summs) sharing each weight load; the token tail runs
// the same code with fewer tokens. Padding rows (q, d, m 0) are computed, not stored.
// GCC 12 reports its own _mm512_undefined_ps() (inside _mm512_cvtepi32_ps) as maybe
// uninitialised: a known false positive of the header, silenced for this file (GCC only).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "numerics/ggml_gemm.h"

namespace kvstash::model::ggml::internal {
namespace {

constexpr uint32_t kTokens = 8;  // tokens per register block: 24 zmm of state

inline __m512i BroadcastQuad(const int8_t* p) {
  int32_t quad;
  std::memcpy(&quad, p, sizeof(quad));
  return _mm512_set1_epi32(quad);
}

// Tokens [t0, t0 + N) of one row block.
template <uint32_t N>
void Tile(const PackedQ4_1& w, uint32_t row_block, const BlockQ8_1* x, const float* xd, const float* xs,
          uint32_t t0, float* y, size_t y_stride) {
  const uint32_t blocks = w.blocks;
  const size_t tile0 = static_cast<size_t>(row_block) * blocks;
  __m512 acc[N], summs[N];
#pragma GCC unroll 8
  for (uint32_t i = 0; i < N; ++i) acc[i] = summs[i] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint8_t* q = &w.q[(tile0 + b) * kPackedQuadBytes];
    __m512i sumi[N];
#pragma GCC unroll 8
    for (uint32_t i = 0; i < N; ++i) sumi[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (uint32_t k = 0; k < kBlock / 4; ++k) {
      const __m512i wq = _mm512_loadu_si512(q + k * kRowBlock * 4);
#pragma GCC unroll 8
      for (uint32_t i = 0; i < N; ++i) {
        const int8_t* xq = x[(t0 + i) * static_cast<size_t>(blocks) + b].qs + 4 * k;
        sumi[i] = _mm512_dpbusd_epi32(sumi[i], wq, BroadcastQuad(xq));
      }
    }
    const __m512 d4 = _mm512_loadu_ps(&w.d[(tile0 + b) * kRowBlock]);
    const __m512 m4 = _mm512_loadu_ps(&w.m[(tile0 + b) * kRowBlock]);
#pragma GCC unroll 8
    for (uint32_t i = 0; i < N; ++i) {
      const size_t xb = (t0 + i) * static_cast<size_t>(blocks) + b;
      const __m512 dd = _mm512_mul_ps(d4, _mm512_set1_ps(xd[xb]));
      acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(sumi[i])));
      summs[i] = _mm512_add_ps(summs[i], _mm512_mul_ps(m4, _mm512_set1_ps(xs[xb])));
    }
  }
  const uint32_t o0 = row_block * kRowBlock;
  const auto lanes = static_cast<__mmask16>((1u << std::min(kRowBlock, w.rows - o0)) - 1);
#pragma GCC unroll 8
  for (uint32_t i = 0; i < N; ++i) {
    _mm512_mask_storeu_ps(y + (t0 + i) * y_stride + o0, lanes, _mm512_add_ps(acc[i], summs[i]));
  }
}

}  // namespace

void GemmRowBlockAvx512(const PackedQ4_1& w, uint32_t row_block, const BlockQ8_1* x, const float* xd,
                        const float* xs, uint32_t tokens, float* y, size_t y_stride) {
  uint32_t t = 0;
  for (; t + kTokens <= tokens; t += kTokens) Tile<kTokens>(w, row_block, x, xd, xs, t, y, y_stride);
  switch (tokens - t) {
    case 7:
      Tile<7>(w, row_block, x, xd, xs, t, y, y_stride);
      break;
    case 6:
      Tile<6>(w, row_block, x, xd, xs, t, y, y_stride);
      break;
    case 5:
      Tile<5>(w, row_block, x, xd, xs, t, y, y_stride);
      break;
    case 4:
      Tile<4>(w, row_block, x, xd, xs, t, y, y_stride);
      break;
    case 3:
      Tile<3>(w, row_block, x, xd, xs, t, y, y_stride);
      break;
    case 2:
      Tile<2>(w, row_block, x, xd, xs, t, y, y_stride);
      break;
    case 1:
      Tile<1>(w, row_block, x, xd, xs, t, y, y_stride);
      break;
    default:
      break;
  }
}

}  // namespace kvstash::model::ggml::internal
