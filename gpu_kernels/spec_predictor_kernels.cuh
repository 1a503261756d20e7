// Kernels of the CUDA spec predictor steps (host API: gpu_kernels/spec_predictor_kernels.h).
// One thread per output row or element, each running the CPU's exact operation order.
#pragma once

#include <cstdint>

#include "numerics/det_math.h"
#include "numerics/quantize_group.h"
#include "numerics/spec_predictor_ops.h"

namespace kvstash::gpu::kernels {

__device__ inline uint64_t ThreadIndex() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline uint64_t GridStride() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

// One (row, group) per thread.
__global__ void QuantizeInt16Kernel(const float* __restrict__ x, int rows, int cols, int group,
                                    int16_t* __restrict__ q, float* __restrict__ scales) {
  const int groups = (cols + group - 1) / group;
  const uint64_t total = static_cast<uint64_t>(rows) * groups;
  for (uint64_t t = ThreadIndex(); t < total; t += GridStride()) {
    const uint64_t r = t / groups, g = t % groups;
    const uint64_t begin = r * cols + g * group;
    const uint64_t left = static_cast<uint64_t>(cols) - g * group;
    const size_t len = left < static_cast<uint64_t>(group) ? left : group;
    scales[t] = spec::QuantizeGroup<int16_t>(x + begin, len, 32767.0f, q + begin);
  }
}

// One output element per thread: exact int32 group dots, fp32 sum over groups in
// increasing order, each term float(dot) * (sa * sb).
__global__ void GemmInt16x8GroupedKernel(const int16_t* __restrict__ a,
                                         const float* __restrict__ a_scale,
                                         const int8_t* __restrict__ b,
                                         const float* __restrict__ b_scale, float* __restrict__ out,
                                         int m, int n, int k, int group) {
  const int groups = (k + group - 1) / group;
  const uint64_t total = static_cast<uint64_t>(m) * n;
  for (uint64_t t = ThreadIndex(); t < total; t += GridStride()) {
    const uint64_t i = t / n, j = t % n;
    const int16_t* ar = a + i * k;
    const int8_t* br = b + j * k;
    float o = 0.0f;
    for (int g = 0; g < groups; ++g) {
      const int k0 = g * group, k1 = k0 + group < k ? k0 + group : k;
      int32_t dot = 0;
      for (int c = k0; c < k1; ++c) dot += static_cast<int32_t>(ar[c]) * static_cast<int32_t>(br[c]);
      const float s = spec::DMul(a_scale[i * groups + g], b_scale[j * groups + g]);
      o = spec::DAdd(o, spec::DMul(static_cast<float>(dot), s));
    }
    out[t] = o;
  }
}

__global__ void RmsNormKernel(float* __restrict__ x, uint32_t rows, uint32_t n,
                              const float* __restrict__ w, float eps) {
  for (uint64_t r = ThreadIndex(); r < rows; r += GridStride()) {
    model::RmsNormRow(x + r * n, n, w, eps);
  }
}

// One (token, head) per thread.
__global__ void RopeKernel(float* __restrict__ x, uint32_t tokens, uint32_t heads,
                           uint32_t head_dim, const float* __restrict__ cos,
                           const float* __restrict__ sin) {
  const uint32_t half = head_dim / 2;
  const uint64_t total = static_cast<uint64_t>(tokens) * heads;
  for (uint64_t t = ThreadIndex(); t < total; t += GridStride()) {
    const uint64_t token = t / heads;
    model::RopeRow(x + t * head_dim, cos + token * half, sin + token * half, half);
  }
}

// One (query row, head) per thread.
__global__ void CausalAttentionKernel(const float* __restrict__ q, const float* __restrict__ k,
                                      const float* __restrict__ v, uint32_t first, uint32_t rows,
                                      uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim,
                                      float scale, float* __restrict__ scratch,
                                      float* __restrict__ out) {
  const uint32_t per_kv = n_heads / n_kv_heads;
  const uint64_t total = static_cast<uint64_t>(rows) * n_heads;
  const uint64_t keys = static_cast<uint64_t>(first) + rows;
  const uint64_t stride = static_cast<uint64_t>(n_kv_heads) * head_dim;
  for (uint64_t job = ThreadIndex(); job < total; job += GridStride()) {
    const uint32_t t = static_cast<uint32_t>(job / n_heads), h = static_cast<uint32_t>(job % n_heads);
    const uint32_t g = h / per_kv;
    model::AttentionRow(q + job * head_dim, k + static_cast<uint64_t>(g) * head_dim,
                        v + static_cast<uint64_t>(g) * head_dim, stride, first + t + 1, head_dim,
                        scale, scratch + job * keys, out + job * head_dim);
  }
}

__global__ void AddInPlaceKernel(float* __restrict__ x, const float* __restrict__ y, uint64_t n) {
  for (uint64_t i = ThreadIndex(); i < n; i += GridStride()) x[i] = spec::DAdd(x[i], y[i]);
}

__global__ void AddBiasRowsKernel(float* __restrict__ rows, uint64_t total, uint32_t n,
                                  const float* __restrict__ bias) {
  for (uint64_t i = ThreadIndex(); i < total; i += GridStride()) rows[i] = spec::DAdd(rows[i], bias[i % n]);
}

__global__ void SiluMulKernel(float* __restrict__ gate, const float* __restrict__ up, uint64_t n) {
  for (uint64_t i = ThreadIndex(); i < n; i += GridStride()) {
    gate[i] = spec::DMul(spec::DetSilu(gate[i]), up[i]);
  }
}

}  // namespace kvstash::gpu::kernels
