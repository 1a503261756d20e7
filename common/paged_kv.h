// Index arithmetic between a canonical chunk (kvstash/kv_chunk.h) and an engine's paged
// KV cache (vLLM's blocks), shared by the host reference below and the CUDA kernels
// of gpu_kernels/kv_blocks.h: every function marked KVSTASH_HD is compiled for both
// (plain C++ without nvcc), so the CPU tests of the host reference test the very
// arithmetic the kernels run.
//
// Canonical chunk (bf16/f16, 2-byte elements): for l, kv in K, V: [T, H, D] row-major;
// element (l, kv, t, h, d) at ((2 l + kv) T + t) H D + h D + d.
//
// Paged cache of one layer, described by element strides (torch's tensor.stride()):
// element (kv, block, slot, h, d) at
//   kv * kv_stride + block * block_stride + slot * slot_stride + h * head_stride + d
// (the dim stride must be 1). This covers vLLM 0.32's CUDA backends (flash_attn,
// flashinfer, triton_attn): one tensor per layer, logical [num_blocks, H, block_size,
// 2 D] with K in content dims [0, D) and V in [D, 2 D) (kv_stride = D), in any of
// KVCacheLayout's physical orders; and the older 5-D layouts (2, num_blocks,
// block_size, H, D) / (num_blocks, 2, block_size, H, D) with NHD or HND strides
// (kv_stride = the K/V axis stride). The CPU backend's ISA-specific tile order is NOT
// a strided layout (engines/vllm/kvstash_vllm/layout.py handles it).
//
// A transfer moves chunk tokens [t_begin, t_end): chunk token t is the request's
// token p = first_token + t, which lives in block block_ids[p / block_size] at slot
// p % block_size (block_ids: the request's block table from token 0).
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <span>

#include "kvstash/dtype_bits.h"  // KVSTASH_HD
#include "kvstash/result.h"

namespace kvstash {

// Element strides (2-byte elements) of one layer's paged cache; every layer of a
// transfer has the same shape and strides (its own base pointer).
struct PagedKvStrides {
  uint64_t kv = 0;     // K -> V
  uint64_t block = 0;  // block b -> b + 1
  uint64_t slot = 0;   // slot s -> s + 1 inside a block
  uint64_t head = 0;   // head h -> h + 1
};

// One scatter (chunk -> cache) or gather (cache -> chunk) of all layers.
struct PagedKvTransfer {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  uint32_t chunk_tokens = 0;  // T of the canonical chunk buffer
  uint32_t t_begin = 0, t_end = 0;  // chunk tokens moved, t_begin <= t_end <= T
  uint64_t first_token = 0;   // request position of chunk token 0
  uint32_t block_size = 0;    // tokens per block
  uint64_t num_blocks = 0;    // blocks per layer cache (bound for block ids)
  uint32_t n_block_ids = 0;   // entries of the block table
  PagedKvStrides strides;

  // Elements moved: n_layers * 2 * (t_end - t_begin) * n_kv_heads * head_dim.
  KVSTASH_HD uint64_t Count() const {
    return 2ull * n_layers * (t_end - t_begin) * n_kv_heads * head_dim;
  }
};

// Where element i (i < Count()) of a transfer lives on both sides. The elements are
// ordered (l, kv, t - t_begin, h, d), d fastest, so consecutive threads touch
// consecutive canonical elements and, for dim-contiguous caches, consecutive cache
// elements.
struct PagedKvElement {
  uint32_t layer = 0;
  uint64_t canonical = 0;  // element offset in the canonical chunk
  uint64_t cache = 0;      // element offset from the layer's base pointer
};

// The block-table entry index and slot of chunk token t (no bounds checks).
KVSTASH_HD inline uint64_t PagedKvBlockIndex(const PagedKvTransfer& x, uint32_t t) {
  return (x.first_token + t) / x.block_size;
}
KVSTASH_HD inline uint32_t PagedKvSlot(const PagedKvTransfer& x, uint32_t t) {
  return static_cast<uint32_t>((x.first_token + t) % x.block_size);
}

// Element offset of (kv, block, slot, h, d) in one layer's cache.
KVSTASH_HD inline uint64_t PagedKvCacheOffset(const PagedKvStrides& s, uint32_t kv, uint64_t block,
                                              uint32_t slot, uint32_t h, uint32_t d) {
  return kv * s.kv + block * s.block + slot * s.slot + h * s.head + d;
}

// Element offset of (l, kv, t, h, d) in a canonical chunk of T tokens.
KVSTASH_HD inline uint64_t CanonicalKvOffset(uint32_t T, uint32_t H, uint32_t D, uint32_t l, uint32_t kv,
                                             uint32_t t, uint32_t h, uint32_t d) {
  return ((2ull * l + kv) * T + t) * H * D + static_cast<uint64_t>(h) * D + d;
}

// Element i of a transfer; block_ids as validated by ValidatePagedKvTransfer.
// REQUIRES: i < x.Count().
KVSTASH_HD inline PagedKvElement PagedKvElementAt(const PagedKvTransfer& x, const int32_t* block_ids,
                                                  uint64_t i) {
  const uint32_t D = x.head_dim, H = x.n_kv_heads, n = x.t_end - x.t_begin;
  const uint32_t d = static_cast<uint32_t>(i % D);
  uint64_t r = i / D;
  const uint32_t h = static_cast<uint32_t>(r % H);
  r /= H;
  const uint32_t t = x.t_begin + static_cast<uint32_t>(r % n);
  r /= n;
  const uint32_t kv = static_cast<uint32_t>(r % 2);
  const uint32_t l = static_cast<uint32_t>(r / 2);
  PagedKvElement e;
  e.layer = l;
  e.canonical = CanonicalKvOffset(x.chunk_tokens, H, D, l, kv, t, h, d);
  const uint64_t block = static_cast<uint64_t>(block_ids[PagedKvBlockIndex(x, t)]);
  e.cache = PagedKvCacheOffset(x.strides, kv, block, PagedKvSlot(x, t), h, d);
  return e;
}

// InvalidArgument unless: every dim >= 1, block_size >= 1, t_begin <= t_end <=
// chunk_tokens, first_token + t_end fits 64 bits, the block table covers
// first_token + t_end - 1 (when t_end > t_begin), and the entries it uses are distinct
// and in [0, num_blocks). Offsets are then within the cache the strides describe when
// that cache has num_blocks blocks, and no two tokens write one slot.
Status ValidatePagedKvTransfer(const PagedKvTransfer& x, std::span<const int32_t> block_ids);

// Host reference: copies chunk tokens [t_begin, t_end) of the canonical `chunk`
// (2-byte elements) into the layer caches `layers[l]` (element pointers), element by
// element through PagedKvElementAt. Validates first (errors above; InvalidArgument
// for a chunk of the wrong size or a wrong layer count). Elements outside the moved
// tokens are left as they are.
Status ScatterChunkHost(const PagedKvTransfer& x, std::span<const int32_t> block_ids,
                        std::span<const uint16_t> chunk, std::span<uint16_t* const> layers);

// Host reference of the inverse: reads chunk tokens [t_begin, t_end) from the caches
// into `chunk`; its other tokens are left as they are.
Status GatherChunkHost(const PagedKvTransfer& x, std::span<const int32_t> block_ids,
                       std::span<const uint16_t* const> layers, std::span<uint16_t> chunk);

}  // namespace kvstash
