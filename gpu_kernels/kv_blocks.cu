// Host side of the paged KV scatter/gather (kv_blocks.h) and its kernel launches.
#include "gpu_kernels/kv_blocks.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/kv_blocks.cuh"

namespace kvstash::gpu {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(uint64_t n) {
  return static_cast<unsigned>(std::clamp<uint64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

Status Check(const PagedKvTransfer& x, std::span<const int32_t> block_ids, const void* chunk, size_t n_layers,
             const void* const* layers) {
  KVSTASH_RETURN_IF_ERROR(ValidatePagedKvTransfer(x, block_ids));
  if (n_layers != x.n_layers) {
    return Status::InvalidArgument("paged KV transfer: " + std::to_string(n_layers) + " layer caches for " +
                                   std::to_string(x.n_layers) + " layers");
  }
  if (chunk == nullptr) return Status::InvalidArgument("paged KV transfer: null chunk");
  for (size_t l = 0; l < n_layers; ++l) {
    if (layers[l] == nullptr) return Status::InvalidArgument("paged KV transfer: null layer cache");
  }
  return Status::Ok();
}

// Uploads the block table and the layer pointers into one stream-ordered allocation,
// launches `launch(ids, ptrs)`, and frees the allocation on the stream.
template <typename Launch>
Status WithTables(std::span<const int32_t> block_ids, const void* const* layers, size_t n_layers,
                  cudaStream_t stream, Launch launch) {
  const size_t ptr_bytes = n_layers * sizeof(void*);
  const size_t ids_at = (ptr_bytes + 255) / 256 * 256;
  const size_t total = ids_at + std::max<size_t>(block_ids.size(), 1) * sizeof(int32_t);
  std::vector<uint8_t> staging(total, 0);
  std::memcpy(staging.data(), layers, ptr_bytes);
  if (!block_ids.empty()) std::memcpy(staging.data() + ids_at, block_ids.data(), block_ids.size() * sizeof(int32_t));
  void* dev = nullptr;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&dev, total, stream));
  // Pageable source: cudaMemcpyAsync returns once `staging` has been read.
  const Status uploaded = CudaStatus(cudaMemcpyAsync(dev, staging.data(), total, cudaMemcpyHostToDevice, stream),
                                     "paged KV: upload tables");
  if (uploaded.ok()) {
    launch(static_cast<const int32_t*>(static_cast<const void*>(static_cast<uint8_t*>(dev) + ids_at)), dev);
  }
  const Status launched = uploaded.ok() ? CudaStatus(cudaGetLastError(), "paged KV: kernel launch") : uploaded;
  const Status freed = CudaStatus(cudaFreeAsync(dev, stream), "paged KV: cudaFreeAsync");
  return launched.ok() ? freed : launched;
}

}  // namespace

Status ScatterChunkCuda(const PagedKvTransfer& x, std::span<const int32_t> block_ids, const uint16_t* chunk,
                        std::span<uint16_t* const> layers, cudaStream_t stream) {
  const void* const* ptrs = reinterpret_cast<const void* const*>(layers.data());
  KVSTASH_RETURN_IF_ERROR(Check(x, block_ids, chunk, layers.size(), ptrs));
  const uint64_t n = x.Count();
  if (n == 0) return Status::Ok();
  return WithTables(block_ids, ptrs, layers.size(), stream, [&](const int32_t* ids, void* dev_layers) {
    kernels::PagedKvScatterKernel<<<Blocks(n), kThreads, 0, stream>>>(x, ids, chunk,
                                                                       static_cast<uint16_t* const*>(dev_layers));
  });
}

Status GatherChunkCuda(const PagedKvTransfer& x, std::span<const int32_t> block_ids,
                       std::span<const uint16_t* const> layers, uint16_t* chunk, cudaStream_t stream) {
  const void* const* ptrs = reinterpret_cast<const void* const*>(layers.data());
  KVSTASH_RETURN_IF_ERROR(Check(x, block_ids, chunk, layers.size(), ptrs));
  const uint64_t n = x.Count();
  if (n == 0) return Status::Ok();
  return WithTables(block_ids, ptrs, layers.size(), stream, [&](const int32_t* ids, void* dev_layers) {
    kernels::PagedKvGatherKernel<<<Blocks(n), kThreads, 0, stream>>>(
        x, ids, static_cast<const uint16_t* const*>(dev_layers), chunk);
  });
}

}  // namespace kvstash::gpu
