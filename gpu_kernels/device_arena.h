// DeviceArena: one cudaMalloc carved into 256-byte aligned parts, freed on destruction;
// the per-call workspace of the GPU decoders (dckv_decode.cu, spec_payload_decode.cc).
// Usage: Reserve every part's size on a running total (host arithmetic only), then
// Allocate(total) once, then at<T>(offset) for each part's device pointer.
//
// Host API only (no device syntax). Errors: Allocate returns gpu::CudaStatus of the
// failed cudaMalloc (ResourceExhausted when out of device memory).
// Thread-safety: an arena belongs to one call; not shared.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "gpu_kernels/cuda_check.h"

namespace kvstash::gpu {

class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(DeviceArena&& o) noexcept : base_(std::exchange(o.base_, nullptr)) {}
  DeviceArena& operator=(DeviceArena&&) = delete;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() {
    if (base_ != nullptr) (void)cudaFree(base_);
  }

  // Reserves `bytes` (rounded up to 256) on `*total` and returns the part's offset.
  static uint64_t Reserve(uint64_t* total, uint64_t bytes) {
    const uint64_t at = *total;
    *total += (bytes + 255) / 256 * 256;
    return at;
  }

  // Allocates `total` bytes (at least 256); `what` names the caller in the error.
  Status Allocate(uint64_t total, const char* what) {
    return CudaStatus(cudaMalloc(&base_, std::max<uint64_t>(total, 256)), what);
  }

  // Device pointer of the part at `offset` (from Reserve).
  template <typename T>
  T* at(uint64_t offset) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(base_) + offset);
  }

 private:
  void* base_ = nullptr;
};

}  // namespace kvstash::gpu
