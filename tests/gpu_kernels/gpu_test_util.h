// Helpers for GPU tests: skip visibly without a device; RAII device buffers.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_kernels/cuda_check.h"

#define KVSTASH_SKIP_WITHOUT_GPU()                                              \
  do {                                                                          \
    std::string _why;                                                           \
    if (!::kvstash::gpu::CudaDeviceAvailable(&_why)) {                          \
      GTEST_SKIP() << "SKIPPED: no CUDA device (" << _why                       \
                   << "); run scripts/gpu_check.sh on a GPU machine";           \
    }                                                                           \
  } while (0)

namespace kvstash::gpu::testing {

// Device copy of a host vector; freed on destruction.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

}  // namespace kvstash::gpu::testing
