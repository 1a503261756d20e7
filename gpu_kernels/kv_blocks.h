// CUDA scatter of canonical chunks into an engine's paged KV cache (vLLM's CUDA
// blocks) and the inverse gather for saves. The index maths is common/paged_kv.h's
// PagedKvElementAt, the one definition the host reference (ScatterChunkHost,
// GatherChunkHost, tested on the CPU in CI) runs too; each thread copies one 2-byte
// element (bf16 or f16 bit pattern: nothing is converted or rounded, so the result is
// byte-identical to the host reference; tests/gpu_kernels/kv_blocks_gpu_test.cc).
//
// Memory: `chunk` and every layer pointer are device memory (the caches: the engine's
// own tensors, e.g. torch CUDA tensors); the block table is host memory and is
// uploaded per call with the layer pointer array into a stream-ordered allocation
// (cudaMallocAsync, freed with cudaFreeAsync on the same stream).
//
// Host API only (no device syntax). Both functions validate on the host
// (ValidatePagedKvTransfer and the sizes), then ENQUEUE on `stream` and return without
// synchronising it: the chunk and the caches must stay valid, and must not be written
// by other streams, until the stream has run the copy (the caller orders its later
// work on the same stream or synchronises it).
//
// Errors: InvalidArgument for a transfer ValidatePagedKvTransfer refuses, a layer
//   count that differs from x.n_layers, a null pointer; CUDA errors as gpu::CudaStatus
//   (Unavailable without a device).
// Thread-safety: stateless; concurrent calls are fine (on disjoint blocks).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "common/paged_kv.h"
#include "kvstash/result.h"

namespace kvstash::gpu {

// Writes chunk tokens [x.t_begin, x.t_end) of the canonical device chunk `chunk`
// (2 * n_layers * chunk_tokens * n_kv_heads * head_dim elements) into the caches
// layers[l] (device element pointers, one per layer).
Status ScatterChunkCuda(const PagedKvTransfer& x, std::span<const int32_t> block_ids, const uint16_t* chunk,
                        std::span<uint16_t* const> layers, cudaStream_t stream);

// Reads chunk tokens [x.t_begin, x.t_end) from the caches into the device chunk.
Status GatherChunkCuda(const PagedKvTransfer& x, std::span<const int32_t> block_ids,
                       std::span<const uint16_t* const> layers, uint16_t* chunk, cudaStream_t stream);

}  // namespace kvstash::gpu
