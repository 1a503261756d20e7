#include "codec/dckv/dckv_synthesis.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "codec/dckv/dckv_synthesis_internal.h"
#include "common/cpu_path.h"

namespace kvstash::dckv {
namespace internal {

void SynthesisTilePortable(const float* panel, uint32_t n_active, const float* const* rows, bool zeros,
                           const float* mean16, float* tile) {
  constexpr uint32_t P = kSynthesisPanel;
  for (uint32_t r = 0; r < kSynthesisTileRows; ++r) std::copy_n(mean16, P, tile + r * P);
  for (uint32_t i = 0; i < n_active; ++i) {
    const float* w = panel + static_cast<size_t>(i) * P;
    for (uint32_t r = 0; r < kSynthesisTileRows; ++r) {
      const float c = rows[r][i];
      float* t = tile + r * P;
      if (zeros && c == 0.0f) {
        for (uint32_t j = 0; j < P; ++j) t[j] += -0.0f;  // the skipped term (a no-op)
      } else {
        for (uint32_t j = 0; j < P; ++j) t[j] += c * w[j];
      }
    }
  }
}

}  // namespace internal

PackedBasis PackBasis(std::span<const float> basis, uint32_t n_active, uint32_t dims) {
  PackedBasis p;
  p.n_active = n_active;
  p.dims = dims;
  constexpr uint32_t P = kSynthesisPanel;
  p.finite = std::all_of(basis.begin(), basis.end(), [](float w) { return std::isfinite(w); });
  p.panels.assign(static_cast<size_t>(p.num_panels()) * n_active * P, 0.0f);
  for (uint32_t q = 0; q < p.num_panels(); ++q) {
    const uint32_t j0 = q * P, width = std::min(P, dims - j0);
    float* dst = p.panels.data() + static_cast<size_t>(q) * n_active * P;
    for (uint32_t i = 0; i < n_active; ++i) {
      std::copy_n(basis.data() + static_cast<size_t>(i) * dims + j0, width, dst + static_cast<size_t>(i) * P);
    }
  }
  return p;
}

bool SynthesisHasAvx2() { return CpuMayUseAvx2(); }

bool SynthesisHasAvx512() { return CpuMayUseAvx512(); }

namespace {

// Runs a tile kernel of kRows rows x kPanels panels over every tile of the output:
// tile_fn(panels, row_ptr, interleaved, nr, zeros, mean_tile, tile) computes rows
// row_ptr[0, kRows) (the first nr real, the rest repeating the last) of the panels
// into tile[kRows][kPanels * 16]. With kInterleave, `interleaved` holds the same
// coefficients as [n_active][kRows] (else null). Panels past the last repeat it and
// are not stored.
template <uint32_t kRows, uint32_t kPanels, bool kInterleave, class TileFn>
void RunTiles(const PackedBasis& basis, std::span<const float> mean, std::span<const float> coef, uint32_t rows,
              std::span<float> out, const TileFn& tile_fn) {
  constexpr uint32_t P = kSynthesisPanel, W = kPanels * P;
  const uint32_t na = basis.n_active, dims = basis.dims, np = basis.num_panels();
  // Rows holding a zero coefficient take the kernel's skip path.
  std::vector<uint8_t> has_zero(rows);
  for (uint32_t r = 0; r < rows; ++r) {
    const float* c = coef.data() + static_cast<size_t>(r) * na;
    has_zero[r] = std::any_of(c, c + na, [](float v) { return v == 0.0f; });
  }
  const uint32_t tiles = (rows + kRows - 1) / kRows;
  std::vector<float> interleaved(kInterleave ? static_cast<size_t>(tiles) * na * kRows : 0);
  for (uint32_t t = 0; kInterleave && t < tiles; ++t) {
    for (uint32_t r = 0; r < kRows; ++r) {
      const float* c = coef.data() + static_cast<size_t>(std::min(t * kRows + r, rows - 1)) * na;
      float* dst = interleaved.data() + static_cast<size_t>(t) * na * kRows + r;
      for (uint32_t i = 0; i < na; ++i) dst[static_cast<size_t>(i) * kRows] = c[i];
    }
  }
  float mean_tile[W];
  float tile[kRows * W];
  for (uint32_t q0 = 0; q0 < np; q0 += kPanels) {
    const float* panel[kPanels];
    uint32_t width[kPanels];
    std::fill_n(mean_tile, W, 0.0f);
    for (uint32_t k = 0; k < kPanels; ++k) {
      const uint32_t q = std::min(q0 + k, np - 1), j0 = (q0 + k) * P;
      panel[k] = basis.panels.data() + static_cast<size_t>(q) * na * P;
      width[k] = j0 < dims ? std::min(P, dims - j0) : 0;
      std::copy_n(mean.data() + (j0 < dims ? j0 : 0), width[k], mean_tile + k * P);
    }
    // Zero terms need the skip path unless they leave every value unchanged as they are.
    const bool plain_zeros = basis.finite && std::all_of(mean_tile, mean_tile + W, [](float m) {
      return std::isfinite(m) && std::bit_cast<uint32_t>(m) != 0x80000000u;
    });
    for (uint32_t r0 = 0; r0 < rows; r0 += kRows) {
      const uint32_t nr = std::min(kRows, rows - r0);
      const float* row_ptr[kRows];
      bool zeros = false;
      for (uint32_t r = 0; r < kRows; ++r) {
        const uint32_t rr = r0 + std::min(r, nr - 1);  // rows past the end repeat the last
        row_ptr[r] = coef.data() + static_cast<size_t>(rr) * na;
        zeros = zeros || (has_zero[rr] && !plain_zeros);
      }
      const float* tile_coef = kInterleave ? interleaved.data() + static_cast<size_t>(r0) * na : nullptr;
      tile_fn(panel, row_ptr, tile_coef, nr, zeros, mean_tile, tile);
      for (uint32_t r = 0; r < nr; ++r) {
        for (uint32_t k = 0; k < kPanels && width[k] > 0; ++k) {
          std::copy_n(tile + r * W + k * P, width[k], out.data() + static_cast<size_t>(r0 + r) * dims + (q0 + k) * P);
        }
      }
    }
  }
}

}  // namespace

void SynthesizeRows(const PackedBasis& basis, std::span<const float> mean, std::span<const float> coef,
                    uint32_t rows, std::span<float> out, SynthesisPath path) {
  const uint32_t na = basis.n_active;
  const bool avx512 = (path == SynthesisPath::kAuto || path == SynthesisPath::kAvx512) && SynthesisHasAvx512();
  const bool avx2 = !avx512 && path != SynthesisPath::kPortable && SynthesisHasAvx2();
#if defined(__x86_64__)
  if (avx512) {
    return RunTiles<internal::kSynthesisTileRowsAvx512, 2, true>(
        basis, mean, coef, rows, out,
        [&](const float* const* panel, const float* const*, const float* tile_coef, uint32_t nr, bool zeros,
            const float* mean_tile, float* tile) {
          internal::SynthesisTileAvx512(panel[0], panel[1], na, tile_coef, nr, zeros, mean_tile, tile);
        });
  }
  auto* tile_fn = avx2 ? &internal::SynthesisTileAvx2 : &internal::SynthesisTilePortable;
#else
  (void)avx512, (void)avx2;
  auto* tile_fn = &internal::SynthesisTilePortable;
#endif
  RunTiles<kSynthesisTileRows, 1, false>(basis, mean, coef, rows, out,
                                         [&](const float* const* panel, const float* const* row_ptr, const float*,
                                             uint32_t, bool zeros, const float* mean_tile, float* tile) {
                                           tile_fn(panel[0], na, row_ptr, zeros, mean_tile, tile);
                                         });
}

void SynthesizeRowsReference(std::span<const float> basis, uint32_t n_active, uint32_t dims,
                             std::span<const float> mean, std::span<const float> coef, uint32_t rows,
                             std::span<float> out) {
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t j = 0; j < dims; ++j) {
      float x = mean[j];
      for (uint32_t i = 0; i < n_active; ++i) {
        const float c = coef[static_cast<size_t>(r) * n_active + i];
        if (c != 0.0f) x += c * basis[static_cast<size_t>(i) * dims + j];
      }
      out[static_cast<size_t>(r) * dims + j] = x;
    }
  }
}

}  // namespace kvstash::dckv
