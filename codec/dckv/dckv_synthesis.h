// The dckv synthesis transform, x^ = mean + sum_i c_i basis_i, for many rows at once:
// register-tiled kernels over the basis packed in 16-column panels, chosen at run time:
// AVX-512 (12 rows x 32 columns per tile), AVX2 and portable (6 rows x 16 columns).
//
// Contract (docs/format/dckv.md, "Rows and transform"): every output value is
//   x[r][j] = mean[j], then for i = 0, 1, ..., n_active - 1 with c[r][i] != 0:
//             x[r][j] = fp32(x[r][j] + fp32(c[r][i] * basis[i][j]))
// (product rounded to fp32, then the sum; no fused multiply-add). Every path and
// SynthesizeRowsReference (the plain loop written exactly like that) give
// bit-identical results on every machine built with -ffp-contract=off: lanes of a
// vector multiply/add are IEEE fp32 operations, and the tiling changes only which
// values are computed together, never the order of one value's terms.
// The decoder's content checksum relies on this.
//
// Skipped terms (c = 0) cost nothing extra where they can be added as they are: when
// the basis and a panel's mean values are finite and none is -0.0, x[r][j] is never
// -0.0 (a round-to-nearest sum is -0.0 only when both terms are, and x starts as a
// mean value that is not), so adding the term c * w = +-0.0 (w finite) leaves x
// unchanged (x + +-0 == x for every x but -0.0; inf and NaN pass through too), and
// the kernels run every term. Elsewhere a skipped term is emulated by adding -0.0
// (x + -0.0 == x for every x, +-0 included) or masked out of the add.
//
// Shapes: basis [n_active, dims] row-major fp32, mean [dims], coef [rows, n_active],
// out [rows, dims] (row stride dims). Thread-safety: PackedBasis is immutable after
// PackBasis; SynthesizeRows may run concurrently on disjoint outputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvstash::dckv {

inline constexpr uint32_t kSynthesisPanel = 16;  // columns per packed panel
inline constexpr uint32_t kSynthesisTileRows = 6;

// The basis in column panels: panel p holds columns [16p, 16p + 16) of every
// component, [n_active][16] contiguous, zero padded past dims.
struct PackedBasis {
  uint32_t n_active = 0, dims = 0;
  std::vector<float> panels;  // [ceil(dims / 16)][n_active][16]
  bool finite = true;         // every weight finite (see "Skipped terms" above)
  uint32_t num_panels() const { return (dims + kSynthesisPanel - 1) / kSynthesisPanel; }
};

// REQUIRES basis.size() == n_active * dims.
PackedBasis PackBasis(std::span<const float> basis, uint32_t n_active, uint32_t dims);

enum class SynthesisPath { kAuto, kPortable, kAvx2, kAvx512 };

// Whether this CPU runs the AVX2 path (kAuto resolves to it when true and AVX-512 is
// not there): common/cpu_path.h's CpuMayUseAvx2. False under KVSTASH_CPU_PATH=scalar.
bool SynthesisHasAvx2();
// Whether this CPU runs the AVX-512 path (AVX-512 F/BW/DQ/VL; kAuto resolves to it
// when true): CpuMayUseAvx512. False under KVSTASH_CPU_PATH=avx2 or scalar.
bool SynthesisHasAvx512();

// out[r * dims + j] for rows [0, rows) as defined above, columns [0, dims).
// REQUIRES mean.size() == dims, coef.size() >= rows * n_active, out.size() >= rows *
// dims. kAvx512 runs the AVX-512 path where SynthesisHasAvx512(); kAvx2 (and kAvx512
// without AVX-512) the AVX2 path where SynthesisHasAvx2(); the portable path otherwise.
void SynthesizeRows(const PackedBasis& basis, std::span<const float> mean, std::span<const float> coef,
                    uint32_t rows, std::span<float> out, SynthesisPath path = SynthesisPath::kAuto);

// The defining loop, one value at a time (tests and documentation).
void SynthesizeRowsReference(std::span<const float> basis, uint32_t n_active, uint32_t dims,
                             std::span<const float> mean, std::span<const float> coef, uint32_t rows,
                             std::span<float> out);

}  // namespace kvstash::dckv
