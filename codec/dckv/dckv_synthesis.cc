#include "codec/dckv/dckv_synthesis.h"

#include <algorithm>
#include <bit>

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

bool SynthesisHasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && CpuPathAllowsAvx2();
  return has;
#else
  return false;
#endif
}

void SynthesizeRows(const PackedBasis& basis, std::span<const float> mean, std::span<const float> coef,
                    uint32_t rows, std::span<float> out, SynthesisPath path) {
  constexpr uint32_t P = kSynthesisPanel, TR = kSynthesisTileRows;
  const uint32_t na = basis.n_active, dims = basis.dims;
  const bool avx2 = path != SynthesisPath::kPortable && SynthesisHasAvx2();
#if defined(__x86_64__)
  auto* tile_fn = avx2 ? &internal::SynthesisTileAvx2 : &internal::SynthesisTilePortable;
#else
  (void)avx2;
  auto* tile_fn = &internal::SynthesisTilePortable;
#endif
  // Rows holding a zero coefficient take the kernel's skip path.
  std::vector<uint8_t> has_zero(rows);
  for (uint32_t r = 0; r < rows; ++r) {
    const float* c = coef.data() + static_cast<size_t>(r) * na;
    has_zero[r] = std::any_of(c, c + na, [](float v) { return v == 0.0f; });
  }
  float mean16[P];
  float tile[TR * P];
  for (uint32_t q = 0; q < basis.num_panels(); ++q) {
    const uint32_t j0 = q * P, width = std::min(P, dims - j0);
    std::fill_n(mean16, P, 0.0f);
    std::copy_n(mean.data() + j0, width, mean16);
    const float* panel = basis.panels.data() + static_cast<size_t>(q) * na * P;
    for (uint32_t r0 = 0; r0 < rows; r0 += TR) {
      const uint32_t nr = std::min(TR, rows - r0);
      const float* row_ptr[TR];
      bool zeros = false;
      for (uint32_t r = 0; r < TR; ++r) {
        const uint32_t rr = r0 + std::min(r, nr - 1);  // rows past the end repeat the last
        row_ptr[r] = coef.data() + static_cast<size_t>(rr) * na;
        zeros = zeros || has_zero[rr];
      }
      tile_fn(panel, na, row_ptr, zeros, mean16, tile);
      for (uint32_t r = 0; r < nr; ++r) {
        std::copy_n(tile + r * P, width, out.data() + static_cast<size_t>(r0 + r) * dims + j0);
      }
    }
  }
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
