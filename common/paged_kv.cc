// Validation and the host reference of common/paged_kv.h.
#include "common/paged_kv.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kvstash {

Status ValidatePagedKvTransfer(const PagedKvTransfer& x, std::span<const int32_t> block_ids) {
  if (x.n_layers == 0 || x.n_kv_heads == 0 || x.head_dim == 0 || x.chunk_tokens == 0 || x.block_size == 0) {
    return Status::InvalidArgument("paged KV transfer: layers, heads, head_dim, chunk tokens and block size must be >= 1");
  }
  if (x.t_begin > x.t_end || x.t_end > x.chunk_tokens) {
    return Status::InvalidArgument("paged KV transfer: tokens [" + std::to_string(x.t_begin) + ", " +
                                   std::to_string(x.t_end) + ") not inside the chunk's " +
                                   std::to_string(x.chunk_tokens));
  }
  if (block_ids.size() != x.n_block_ids) {
    return Status::InvalidArgument("paged KV transfer: n_block_ids differs from the block table's size");
  }
  if (x.t_begin == x.t_end) return Status::Ok();
  if (x.first_token > UINT64_MAX - x.t_end) {
    return Status::InvalidArgument("paged KV transfer: first_token " + std::to_string(x.first_token) +
                                   " + chunk tokens overflows 64 bits");
  }
  const uint64_t first = PagedKvBlockIndex(x, x.t_begin), last = PagedKvBlockIndex(x, x.t_end - 1);
  if (last >= block_ids.size()) {
    return Status::InvalidArgument("paged KV transfer: token " + std::to_string(x.first_token + x.t_end - 1) +
                                   " needs block table entry " + std::to_string(last) + ", the table has " +
                                   std::to_string(block_ids.size()));
  }
  for (uint64_t b = first; b <= last; ++b) {
    if (block_ids[b] < 0 || static_cast<uint64_t>(block_ids[b]) >= x.num_blocks) {
      return Status::InvalidArgument("paged KV transfer: block id " + std::to_string(block_ids[b]) +
                                     " outside the cache's " + std::to_string(x.num_blocks) + " blocks");
    }
  }
  // Two table entries naming one block would make two tokens write one slot (a race on
  // the GPU, and one token's KV lost).
  std::vector<int32_t> used(block_ids.begin() + static_cast<ptrdiff_t>(first),
                            block_ids.begin() + static_cast<ptrdiff_t>(last) + 1);
  std::sort(used.begin(), used.end());
  if (auto dup = std::adjacent_find(used.begin(), used.end()); dup != used.end()) {
    return Status::InvalidArgument("paged KV transfer: block id " + std::to_string(*dup) +
                                   " appears twice in the block table");
  }
  return Status::Ok();
}

namespace {

Status CheckSizes(const PagedKvTransfer& x, std::span<const int32_t> block_ids, size_t chunk_elems,
                  size_t n_layers) {
  KVSTASH_RETURN_IF_ERROR(ValidatePagedKvTransfer(x, block_ids));
  const uint64_t want = 2ull * x.n_layers * x.chunk_tokens * x.n_kv_heads * x.head_dim;
  if (chunk_elems != want) {
    return Status::InvalidArgument("paged KV transfer: chunk has " + std::to_string(chunk_elems) +
                                   " elements, the layout " + std::to_string(want));
  }
  if (n_layers != x.n_layers) {
    return Status::InvalidArgument("paged KV transfer: " + std::to_string(n_layers) + " layer caches for " +
                                   std::to_string(x.n_layers) + " layers");
  }
  return Status::Ok();
}

}  // namespace

Status ScatterChunkHost(const PagedKvTransfer& x, std::span<const int32_t> block_ids,
                        std::span<const uint16_t> chunk, std::span<uint16_t* const> layers) {
  KVSTASH_RETURN_IF_ERROR(CheckSizes(x, block_ids, chunk.size(), layers.size()));
  const uint64_t n = x.Count();
  for (uint64_t i = 0; i < n; ++i) {
    const PagedKvElement e = PagedKvElementAt(x, block_ids.data(), i);
    layers[e.layer][e.cache] = chunk[e.canonical];
  }
  return Status::Ok();
}

Status GatherChunkHost(const PagedKvTransfer& x, std::span<const int32_t> block_ids,
                       std::span<const uint16_t* const> layers, std::span<uint16_t> chunk) {
  KVSTASH_RETURN_IF_ERROR(CheckSizes(x, block_ids, chunk.size(), layers.size()));
  const uint64_t n = x.Count();
  for (uint64_t i = 0; i < n; ++i) {
    const PagedKvElement e = PagedKvElementAt(x, block_ids.data(), i);
    chunk[e.canonical] = layers[e.layer][e.cache];
  }
  return Status::Ok();
}

}  // namespace kvstash
