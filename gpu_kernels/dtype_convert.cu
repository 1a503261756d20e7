#include "gpu_kernels/dtype_convert.h"

#include <cmath>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/dtype_convert.cuh"

namespace kvstash::gpu {
namespace {

template <typename In, typename Out, typename Op>
Status Launch(const In* in, Out* out, size_t n, Op op, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  constexpr int kThreads = 256;
  const size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, 65535);
  kernels::MapKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, out, n, op);
  return CudaStatus(cudaGetLastError(), "dtype conversion kernel launch");
}

Status CheckScale(float scale) {
  if (!std::isfinite(scale) || !(scale > 0.0f)) {
    return Status::InvalidArgument("fp8 scale must be finite and > 0");
  }
  return Status::Ok();
}

}  // namespace

Status Bf16ToF32Device(const uint16_t* in, float* out, size_t n, cudaStream_t stream) {
  return Launch(in, out, n, kernels::Bf16ToF32Op{}, stream);
}

Status F32ToBf16Device(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  return Launch(in, out, n, kernels::F32ToBf16Op{}, stream);
}

Status Fp8E4M3ToF32Device(const uint8_t* in, float scale, float* out, size_t n,
                          cudaStream_t stream) {
  KVSTASH_RETURN_IF_ERROR(CheckScale(scale));
  return Launch(in, out, n, kernels::Fp8ToF32Op{scale}, stream);
}

Status F32ToFp8E4M3Device(const float* in, float scale, uint8_t* out, size_t n,
                          cudaStream_t stream) {
  KVSTASH_RETURN_IF_ERROR(CheckScale(scale));
  return Launch(in, out, n, kernels::F32ToFp8Op{scale}, stream);
}

}  // namespace kvstash::gpu
