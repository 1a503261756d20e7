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

#include <cstddef>
#include <cstdint>
#include <type_traits>

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

// Calls fn(std::integral_constant<uint32_t, n>{}) for 1 <= n <= kMax: the kernels' tile
// height as a compile-time constant (so the row loops unroll and stay in registers).
template <uint32_t kMax, typename Fn>
void WithTileRows(uint32_t n, Fn&& fn) {
  if constexpr (kMax > 1) {
    if (n < kMax) return WithTileRows<kMax - 1>(n, fn);
  }
  fn(std::integral_constant<uint32_t, kMax>{});
}

// The kernels' loop over row blocks of kRows (the last one shorter): calls
// rows_fn(height constant, u of the block's first row, mu of it) for each.
template <uint32_t kRows, typename RowsFn>
void ForRowBlocks(const float* u, uint32_t count, uint32_t inputs, uint32_t n_active, float* mu,
                  RowsFn&& rows_fn) {
  for (uint32_t b = 0; b < count; b += kRows) {
    const float* ub = u + static_cast<size_t>(b) * inputs;
    float* mb = mu + static_cast<size_t>(b) * n_active;
    WithTileRows<kRows>(count - b < kRows ? count - b : kRows, [&](auto rows) { rows_fn(rows, ub, mb); });
  }
}

}  // namespace kvstash::dckv::internal
