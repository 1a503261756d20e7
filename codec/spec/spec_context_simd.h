// Internal to codec/spec: the vectorised context computation behind ComputeContexts
// (spec_context.h), for bf16, f16 and fp8 e4m3 targets. spec_context_avx512.cc (16
// lanes) and spec_context_avx2.cc (8 lanes) evaluate ScalarContext
// (spec_context_scalar.h) lane by lane with the same single fp32 operations in the same
// order and the same integer bit manipulation (the dtype conversions of
// kvstash/dtype_bits.h branch by branch), so every output bit equals the scalar body's for
// every input (NaN, Inf, subnormal and saturating predictions included;
// tests/codec/spec/spec_context_simd_test.cc).
//
// Inputs: p built by MakeSpecContextParams (p.fp8 or p.f16 pick the target; neither:
// bf16; for fp8 the scale finite and > 0); mu holds n predicted fp32 scalars, n a
// multiple of row; log2_sigma holds row values, mu[i] taking log2_sigma[i % row].
// Outputs: n prediction ordinals and n table indices. REQUIRES: row >= 1, the CPU check
// of the file's ISA passed (spec::CpuHasAvx512() or CpuHasAvx2(), numerics/int8_gemm.h);
// nothing is validated here.
//
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/spec/spec_context_scalar.h"

namespace kvstash::spec::internal {

void ContextsAvx512(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma,
                    size_t row, uint16_t* pred_ordinal, uint16_t* table);
void ContextsAvx2(const SpecContextParams& p, const float* mu, size_t n, const float* log2_sigma, size_t row,
                  uint16_t* pred_ordinal, uint16_t* table);

}  // namespace kvstash::spec::internal
