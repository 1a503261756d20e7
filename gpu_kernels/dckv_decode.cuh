// Kernels of the CUDA dckv decoder (host API: gpu_kernels/dckv_decode.h): grid-stride
// loops over the per-value bodies of codec/dckv/dckv_decode_element.h, the single
// definition shared with the host (bit-identical to codec/dckv, see there).
#pragma once

#include <cstdint>

#include "codec/dckv/dckv_decode_element.h"

namespace kvstash::gpu::kernels {

// index[s] = the table of symbol s of a chunk (dckv::DckvSymbolTable), s < n.
__global__ void DckvTableIndexKernel(const uint16_t* __restrict__ even, const uint16_t* __restrict__ odd,
                                     uint64_t active, uint64_t n, uint16_t* __restrict__ index) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t s = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < n; s += stride) {
    index[s] = dckv::DckvSymbolTable(even, odd, active, s);
  }
}

// One pass of one group (dckv::DckvPassElement for every index).
__global__ void DckvPassKernel(dckv::DckvPassParams p) {
  const uint64_t n = dckv::DckvPassCount(p);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    dckv::DckvPassElement(p, t);
  }
}

// The hidden layer of one group's decoder correction net (dckv::DckvNetHiddenElement
// for every index).
__global__ void DckvNetHiddenKernel(dckv::DckvNetHiddenParams p) {
  const uint64_t n = dckv::DckvNetHiddenCount(p);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    dckv::DckvNetHiddenElement(p, t);
  }
}

// Synthesis, RoPE and bf16 of one group (dckv::DckvSynthesisElement for every index).
__global__ void DckvSynthesisKernel(dckv::DckvSynthesisParams p) {
  const uint64_t n = dckv::DckvSynthesisCount(p);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    dckv::DckvSynthesisElement(p, t);
  }
}

}  // namespace kvstash::gpu::kernels
