// Kernels of the CUDA spec tensor decoder (host API: gpu_kernels/spec_decode.h).
// Both are element-parallel grid-stride loops over the shared per-scalar functions of
// codec/spec/spec_context_scalar.h.
#pragma once

#include <cstdint>

#include "codec/spec/spec_context_scalar.h"

namespace kvstash::gpu::kernels {

// pred_ordinal[i], table[i] = ScalarContext(mu[i], log2_sigma[i % row]).
__global__ void SpecContextsKernel(spec::SpecContextParams p, const float* __restrict__ mu,
                                   uint64_t n, const float* __restrict__ log2_sigma, uint32_t row,
                                   uint16_t* __restrict__ pred_ordinal,
                                   uint16_t* __restrict__ table) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    spec::ScalarContext(p, mu[i], log2_sigma[i % row], &pred_ordinal[i], &table[i]);
  }
}

// In place: values[i] (a decoded residual symbol) becomes the stored bit pattern.
template <typename T>
__global__ void SpecRebuildKernel(bool fp8, const uint16_t* __restrict__ pred_ordinal, uint64_t n,
                                  T* __restrict__ values) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    values[i] = static_cast<T>(spec::ValueFromResidualBits(fp8, values[i], pred_ordinal[i]));
  }
}

}  // namespace kvstash::gpu::kernels
