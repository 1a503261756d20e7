// Tile kernels of dckv_synthesis.h (shared by dckv_synthesis.cc and the AVX2 and
// AVX-512 files). The portable and AVX2 kernels compute a 6 x 16 tile:
// tile[r][j] = mean16[j] + sum_i c_r[i] * panel[i][j] in the contract's order, rows[r]
// pointing at each row's n_active coefficients. zeros: some coefficient of these rows
// is 0 and must be skipped (its term becomes -0.0 or is masked out; see the header).
// The AVX-512 kernel computes 12 x 32 (panel0 then panel1, mean32 and tile rows of 32
// values) from coef [n_active][12] (row r's coefficient i at coef[12 i + r], so that one
// pointer reaches every row), of which only the first nr (1 <= nr <= 12) rows need be
// right (it runs 4, 8 or 12 rows).
#pragma once

#include <cstdint>

namespace kvstash::dckv::internal {

void SynthesisTilePortable(const float* panel, uint32_t n_active, const float* const* rows, bool zeros,
                           const float* mean16, float* tile);
void SynthesisTileAvx2(const float* panel, uint32_t n_active, const float* const* rows, bool zeros,
                       const float* mean16, float* tile);
inline constexpr uint32_t kSynthesisTileRowsAvx512 = 12;
void SynthesisTileAvx512(const float* panel0, const float* panel1, uint32_t n_active, const float* coef,
                         uint32_t nr, bool zeros, const float* mean32, float* tile);

}  // namespace kvstash::dckv::internal
