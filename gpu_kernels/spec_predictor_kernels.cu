#include "gpu_kernels/spec_predictor_kernels.h"

#include <algorithm>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/spec_predictor_kernels.cuh"
#include "numerics/int8_gemm.h"

namespace kvstash::gpu {
namespace {

constexpr int kThreads = 128;

unsigned Blocks(uint64_t n) {
  return static_cast<unsigned>(std::min<uint64_t>((n + kThreads - 1) / kThreads, 65535));
}

Status Launched(const char* what) { return CudaStatus(cudaGetLastError(), what); }

}  // namespace

Status QuantizeRowsInt16Device(const float* x, int rows, int cols, int group, int16_t* q,
                               float* scales, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || group < 1) {
    return Status::InvalidArgument("quantise: rows, cols >= 0 and group >= 1 required");
  }
  const uint64_t jobs = static_cast<uint64_t>(rows) * ((cols + group - 1) / group);
  if (jobs == 0) return Status::Ok();
  kernels::QuantizeInt16Kernel<<<Blocks(jobs), kThreads, 0, stream>>>(x, rows, cols, group, q, scales);
  return Launched("quantise kernel launch");
}

Status Int16x8GemmGroupedDevice(const int16_t* a, const float* a_scale, const int8_t* b,
                                const float* b_scale, float* out, int m, int n, int k, int group,
                                cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return Status::InvalidArgument("GEMM dimensions must be >= 0");
  if (k > (1 << 17)) return Status::InvalidArgument("GEMM K above 2^17 (as the CPU GEMM)");
  if (group < 1 || group > spec::kMaxInt16Group) {
    return Status::InvalidArgument("int16 x int8 GEMM group must be in [1, 512]");
  }
  const uint64_t jobs = static_cast<uint64_t>(m) * n;
  if (jobs == 0) return Status::Ok();
  kernels::GemmInt16x8GroupedKernel<<<Blocks(jobs), kThreads, 0, stream>>>(a, a_scale, b, b_scale,
                                                                           out, m, n, k, group);
  return Launched("grouped GEMM kernel launch");
}

Status RmsNormRowsDevice(float* x, uint32_t rows, uint32_t n, const float* w, float eps,
                         cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  kernels::RmsNormKernel<<<Blocks(rows), kThreads, 0, stream>>>(x, rows, n, w, eps);
  return Launched("RMSNorm kernel launch");
}

Status RopeDevice(float* x, uint32_t tokens, uint32_t heads, uint32_t head_dim, const float* cos,
                  const float* sin, cudaStream_t stream) {
  if (head_dim % 2 != 0) return Status::InvalidArgument("RoPE: head_dim must be even");
  const uint64_t jobs = static_cast<uint64_t>(tokens) * heads;
  if (jobs == 0) return Status::Ok();
  kernels::RopeKernel<<<Blocks(jobs), kThreads, 0, stream>>>(x, tokens, heads, head_dim, cos, sin);
  return Launched("RoPE kernel launch");
}

Status CausalAttentionDevice(const float* q, const float* k, const float* v, uint32_t first,
                             uint32_t rows, uint32_t n_heads, uint32_t n_kv_heads,
                             uint32_t head_dim, float* scratch, float* out, cudaStream_t stream) {
  if (n_kv_heads == 0 || n_heads % n_kv_heads != 0 || head_dim == 0) {
    return Status::InvalidArgument("attention: n_kv_heads must divide n_heads; head_dim >= 1");
  }
  const uint64_t jobs = static_cast<uint64_t>(rows) * n_heads;
  if (jobs == 0) return Status::Ok();
  const float scale = spec::DetRsqrt(static_cast<float>(head_dim));
  kernels::CausalAttentionKernel<<<Blocks(jobs), kThreads, 0, stream>>>(
      q, k, v, first, rows, n_heads, n_kv_heads, head_dim, scale, scratch, out);
  return Launched("attention kernel launch");
}

Status AddInPlaceDevice(float* x, const float* y, uint64_t n, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  kernels::AddInPlaceKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
  return Launched("residual add kernel launch");
}

Status AddBiasRowsDevice(float* rows, uint64_t n_rows, uint32_t n, const float* bias, cudaStream_t stream) {
  const uint64_t total = n_rows * n;
  if (total == 0) return Status::Ok();
  kernels::AddBiasRowsKernel<<<Blocks(total), kThreads, 0, stream>>>(rows, total, n, bias);
  return Launched("bias add kernel launch");
}

Status SiluMulDevice(float* gate, const float* up, uint64_t n, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  kernels::SiluMulKernel<<<Blocks(n), kThreads, 0, stream>>>(gate, up, n);
  return Launched("SwiGLU kernel launch");
}

}  // namespace kvstash::gpu
