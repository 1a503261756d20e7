// AMX tile kernel of numerics/int8_gemm_packed.h (GemmPacked with the kAmx / kAuto
// backend on a CPU with AMX-TILE and AMX-INT8, when both operands carry the AMX layout:
// every group's length a multiple of 64). Built with -mamx-tile -mamx-int8 and the
// AVX-512 F/BW/DQ/VL flags for this file only (codec/CMakeLists.txt); entered only after
// the run-time check spec::CpuHasAmx(), which also obtained the tile data permission
// from Linux.
//
// Layout (the header's AMX tile layout): A rows are int8 [rows rounded up to 16][k] twice,
// hi = a >> 8 (signed) and lo = a & 255 (unsigned), so a = 256 * hi + lo exactly. B is,
// per 16-channel block, per quad of input channels, 16 channels x 4 int8: one 64-byte
// row of a B tile, so the tile for K step s (64 input channels) is 16 consecutive rows.
// Per 16 tokens x 2 channel blocks and per group: tdpbssd (hi x w, signed x signed) and
// tdpbusd (lo x w, unsigned x signed) into 4 int32 C tiles over the group's K steps.
//
// Exactness: tdpbssd / tdpbusd add exact products of bytes into int32 lanes (no
// saturation: sums wrap modulo 2^32). dot_hi and dot_lo are each far below 2^31
// (|dot_hi| <= 128 * 128 * 512 = 2^23, dot_lo <= 255 * 128 * 512), and the group's true
// dot = 256 * dot_hi + dot_lo fits int32 (the header's preconditions), so computing
// (dot_hi << 8) + dot_lo with wrapping int32 arithmetic gives it exactly even where
// 256 * dot_hi alone would not fit. The fp32 epilogue is the reference's per output
// element, in its order: o = o + float(dot_g) * (a_scale * b_scale) for g = 0, 1, ...
// (vcvtdq2ps, vmulps, vmulps, vaddps; -ffp-contract=off keeps them separate). Padding
// rows (zeros) and padding channels are computed and never stored.
// GCC 12 reports its own _mm512_undefined_ps() (inside _mm512_cvtepi32_ps) as maybe
// uninitialised: a known false positive of the header, silenced for this file (GCC only).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "numerics/int8_gemm_packed.h"

namespace kvstash::spec::internal {
namespace {

constexpr int kTileRows = 16;  // tokens per tile (and rows of a B tile: 64 channels / 4)
constexpr int kStep = 64;      // input channels per tile step (64 bytes a tile row)

// The tile configuration (palette 1): tiles 0-3 C (hi blk0, lo blk0, hi blk1, lo blk1),
// 4-5 A (hi, lo), 6-7 B (blk0, blk1); all 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// o[0..15] = o + float(dot) * (sa * sb), dot = (hi << 8) + lo in wrapping int32.
inline void Accumulate(float* o, const int32_t* hi, const int32_t* lo, __m512 sa, __m512 sb) {
  const __m512i dot = _mm512_add_epi32(_mm512_slli_epi32(_mm512_loadu_si512(hi), 8), _mm512_loadu_si512(lo));
  const __m512 scale = _mm512_mul_ps(sa, sb);
  _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale)));
}

}  // namespace

void SplitRowForAmx(const int16_t* q, int k, int8_t* hi, int8_t* lo) {
  // vpmovwb keeps each int16's low byte: of a >> 8 (-128..127, exact) and of a itself.
  int c = 0;
  for (; c + 32 <= k; c += 32) {
    const __m512i v = _mm512_loadu_si512(q + c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + c), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + c), _mm512_cvtepi16_epi8(v));
  }
  for (; c < k; ++c) {
    hi[c] = static_cast<int8_t>(q[c] >> 8);
    lo[c] = static_cast<int8_t>(static_cast<uint8_t>(q[c] & 0xFF));
  }
}

void GemmPackedAmx(const PackedActivations& a, const PackedWeights& b, float* out, int block_begin,
                   int block_end) {
  const PackedShape& s = b.shape;
  const size_t k = static_cast<size_t>(s.k);
  const int np = b.blocks * kPackedBlock;
  const size_t panel_bytes = static_cast<size_t>(s.pairs) * 2 * kPackedBlock;  // = 16 * k
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kTileRows;
  }
  _tile_loadconfig(&cfg);
  alignas(64) int32_t c[4][kTileRows][kPackedBlock];
  alignas(64) float o[kTileRows][2 * kPackedBlock];
  for (int i0 = 0; i0 < a.m; i0 += kTileRows) {
    const int rows = std::min(kTileRows, a.m - i0);
    const int8_t* ahi = a.amx_hi.data() + static_cast<size_t>(i0) * k;
    const int8_t* alo = a.amx_lo.data() + static_cast<size_t>(i0) * k;
    for (int blk = block_begin; blk < block_end; blk += 2) {
      const int nb = std::min(2, block_end - blk);
      const int8_t* b0 = b.amx.data() + static_cast<size_t>(blk) * panel_bytes;
      const int8_t* b1 = b0 + panel_bytes;
      std::memset(o, 0, sizeof(o));
      for (int g = 0; g < s.groups; ++g) {
        const int k0 = g * s.group, len = std::min(s.group, s.k - k0);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int kk = k0; kk < k0 + len; kk += kStep) {
          _tile_loadd(4, ahi + kk, k);
          _tile_loadd(5, alo + kk, k);
          _tile_loadd(6, b0 + static_cast<size_t>(kk) * kPackedBlock, 64);
          _tile_dpbssd(0, 4, 6);
          _tile_dpbusd(1, 5, 6);
          if (nb == 2) {
            _tile_loadd(7, b1 + static_cast<size_t>(kk) * kPackedBlock, 64);
            _tile_dpbssd(2, 4, 7);
            _tile_dpbusd(3, 5, 7);
          }
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        if (nb == 2) {
          _tile_stored(2, c[2], 64);
          _tile_stored(3, c[3], 64);
        }
        const float* sb = b.scales.data() + static_cast<size_t>(g) * np + blk * kPackedBlock;
        const __m512 sb0 = _mm512_loadu_ps(sb);
        const __m512 sb1 = nb == 2 ? _mm512_loadu_ps(sb + kPackedBlock) : sb0;
        for (int r = 0; r < rows; ++r) {
          const __m512 sa = _mm512_set1_ps(a.scales[static_cast<size_t>(i0 + r) * s.groups + g]);
          Accumulate(o[r], c[0][r], c[1][r], sa, sb0);
          if (nb == 2) Accumulate(o[r] + kPackedBlock, c[2][r], c[3][r], sa, sb1);
        }
      }
      const int j0 = blk * kPackedBlock, cols = std::min(nb * kPackedBlock, b.n - j0);
      for (int r = 0; r < rows; ++r) {
        std::memcpy(out + static_cast<size_t>(i0 + r) * b.n + j0, o[r], sizeof(float) * cols);
      }
    }
  }
  _tile_release();
}

}  // namespace kvstash::spec::internal
