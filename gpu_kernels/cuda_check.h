// CUDA error handling for kvstash: one checking macro that turns a failed CUDA call
// into a Status (never an abort on server paths), and device discovery.
//
// With no GPU (CI), cudaGetDeviceCount fails ("CUDA driver version is insufficient"):
// CudaDeviceAvailable() reports false with that reason, and GPU tests skip visibly.
//
// Thread-safety: functions are thread-safe (they only query the runtime).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kvstash/status.h"

namespace kvstash::gpu {

// Status for a CUDA error code; Ok for cudaSuccess. `what` names the failed call.
Status CudaStatus(cudaError_t err, const char* what);

// True if at least one CUDA device is usable; otherwise false and, if `why` is not
// null, the runtime's reason.
bool CudaDeviceAvailable(std::string* why = nullptr);

}  // namespace kvstash::gpu

// Evaluates a CUDA runtime call; on failure returns its Status from the enclosing
// function (which must return Status or Result<T>).
#define KVSTASH_CUDA_RETURN_IF_ERROR(call) \
  KVSTASH_RETURN_IF_ERROR(::kvstash::gpu::CudaStatus((call), #call))
