// Tile kernels of dckv_synthesis.h (shared by dckv_synthesis.cc and the AVX2 file).
// One call computes a 6 x 16 tile: tile[r][j] = mean16[j] + sum_i c_r[i] * panel[i][j]
// in the contract's order, rows[r] pointing at each row's n_active coefficients.
// kZeros: some coefficient of these rows is 0 (its term becomes -0.0, see the header).
#pragma once

#include <cstdint>

namespace kvstash::dckv::internal {

void SynthesisTilePortable(const float* panel, uint32_t n_active, const float* const* rows, bool zeros,
                           const float* mean16, float* tile);
void SynthesisTileAvx2(const float* panel, uint32_t n_active, const float* const* rows, bool zeros,
                       const float* mean16, float* tile);

}  // namespace kvstash::dckv::internal
