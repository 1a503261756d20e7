// The ISA paths of dckv_conditional.h's PredictRows (dckv_conditional.cc dispatches):
//   mu[b][i] = map[inputs][i], then for j = 0, 1, ..., inputs - 1 with u[b][j] != 0:
//              mu[b][i] = fp32(mu[b][i] + fp32(u[b][j] * map[j][i]))
// for b < count, i < n_active. Shapes: map [inputs + 1][n_active] row-major fp32 (last
// row the bias), u [count][inputs], mu [count][n_active].
// The SIMD kernels hold a register tile of rows x columns of mu across every j (the map
// row is loaded once per tile and the accumulators never go to memory), run separate
// multiplies and adds (never FMA) and keep a lane whose u is 0 (or -0) unchanged,
// exactly as the loop above skips it: every path gives the same bits as
// PredictRowsPortable (tests/codec/dckv/dckv_conditional_test.cc checks each one the
// CPU has). AVX-512: tiles of 8 rows x 32 columns (masked column tail); AVX2: 4 rows x
// 16 columns, the last n_active % 16 columns by the portable loop.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace kvstash::dckv::internal {

void PredictRowsPortable(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t count,
                         float* mu);
// Columns [first_column, n_active) only (the AVX2 kernel's tail).
void PredictRowsPortableColumns(const float* map, uint32_t inputs, uint32_t n_active, const float* u,
                                uint32_t count, uint32_t first_column, float* mu);
void PredictRowsAvx2(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t count,
                     float* mu);
void PredictRowsAvx512(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t count,
                       float* mu);

}  // namespace kvstash::dckv::internal
