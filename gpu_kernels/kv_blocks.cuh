// Kernels of the paged KV scatter/gather (host API: gpu_kernels/kv_blocks.h): grid-
// stride loops over common/paged_kv.h's PagedKvElementAt, one 2-byte element each.
#pragma once

#include <cstdint>

#include "common/paged_kv.h"

namespace kvstash::gpu::kernels {

__global__ void PagedKvScatterKernel(PagedKvTransfer x, const int32_t* __restrict__ block_ids,
                                     const uint16_t* __restrict__ chunk, uint16_t* const* __restrict__ layers) {
  const uint64_t n = x.Count();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const PagedKvElement e = PagedKvElementAt(x, block_ids, i);
    layers[e.layer][e.cache] = chunk[e.canonical];
  }
}

__global__ void PagedKvGatherKernel(PagedKvTransfer x, const int32_t* __restrict__ block_ids,
                                    const uint16_t* const* __restrict__ layers, uint16_t* __restrict__ chunk) {
  const uint64_t n = x.Count();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const PagedKvElement e = PagedKvElementAt(x, block_ids, i);
    chunk[e.canonical] = layers[e.layer][e.cache];
  }
}

}  // namespace kvstash::gpu::kernels
