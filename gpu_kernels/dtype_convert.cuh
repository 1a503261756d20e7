// Kernel templates for gpu_kernels/dtype_convert.h. One thread per element in a
// grid-stride loop; the element function is the shared host/device definition in
// kvstash/dtype_bits.h. Arithmetic uses explicit round-to-nearest intrinsics
// (__fdiv_rn, __fmul_rn) so no fast-math or contraction changes the bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/dtype_bits.h"

namespace kvstash::gpu::kernels {

template <typename In, typename Out, typename Op>
__global__ void MapKernel(const In* __restrict__ in, Out* __restrict__ out, size_t n, Op op) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = op(in[i]);
  }
}

struct Bf16ToF32Op {
  __device__ float operator()(uint16_t b) const { return Bf16ToF32(b); }
};
struct F32ToBf16Op {
  __device__ uint16_t operator()(float f) const { return F32ToBf16(f); }
};
struct Fp8ToF32Op {
  float scale;
  __device__ float operator()(uint8_t q) const { return __fmul_rn(Fp8E4M3ToF32(q), scale); }
};
struct F32ToFp8Op {
  float scale;
  __device__ uint8_t operator()(float f) const { return F32ToFp8E4M3(__fdiv_rn(f, scale)); }
};

}  // namespace kvstash::gpu::kernels
