// acc[i] = fp32(acc[i] + fp32(u * x[i])) for i < n: the update of the dckv conditional
// models (dckv_conditional.h), vectorised (AVX2 chosen at run time, portable loop
// otherwise). Lanes are independent IEEE fp32 multiplies then adds (never fused), so
// every path gives the same bits as the scalar loop, which the entropy-coded round
// trip between machines relies on.
// REQUIRES acc and x do not overlap. Thread-safety: pure function.
#pragma once

#include <cstdint>

namespace kvstash::dckv {

void Axpy(float u, const float* x, float* acc, uint32_t n);

namespace internal {
void AxpyAvx2(float u, const float* x, float* acc, uint32_t n);
}  // namespace internal

}  // namespace kvstash::dckv
