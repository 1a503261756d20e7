#include "gpu_kernels/cuda_check.h"

namespace kvstash::gpu {

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  std::string msg = std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation) return Status::ResourceExhausted(msg);
  if (err == cudaErrorInvalidValue) return Status::InvalidArgument(msg);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    return Status::Unavailable(msg);
  }
  return Status::Internal(msg);
}

bool CudaDeviceAvailable(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error state for later calls
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

}  // namespace kvstash::gpu
