// KV cache chunks and recurrent-state tensors: layout, validation, content checksum.
//
// A chunk is the KV cache of T consecutive tokens for every attention layer of a
// model, in the canonical contiguous layout that every codec consumes and produces
// (engines' paged layouts are converted at the edges, never inside codecs):
//
//   for l in 0..n_layers-1:  K_l [T, n_kv_heads, head_dim]  then  V_l [T, n_kv_heads, head_dim]
//   elements of `dtype`, row-major, little-endian; keys as the engine caches them
//   (after RoPE).
//   fp8_e4m3 only: scales fp32 [n_layers][2] (K then V), x = float(q) * scale.
//
// The content checksum of a chunk is XXH3-64 over the data bytes followed by the
// scales as little-endian fp32 (none for other dtypes). It is what the payload header
// stores and what every decoder verifies before returning KV.
//
// A recurrent state (hybrid models: delta-rule / SSM state, conv state) is a list of
// named tensors stored byte-exact.
//
// Thread-safety: plain values; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvstash/dtype.h"
#include "kvstash/result.h"

namespace kvstash {

// Shape and element type of a model's KV cache per token.
struct KvLayout {
  uint32_t n_layers = 0;    // attention layers stored
  uint32_t n_kv_heads = 0;  // KV heads per layer (after GQA)
  uint32_t head_dim = 0;    // channels per head
  DType dtype = DType::kBF16;

  // Bounds accepted by Validate(); far above any real model, low enough that sizes
  // computed from them never overflow 64 bits.
  static constexpr uint32_t kMaxLayers = 1024;
  static constexpr uint32_t kMaxKvHeads = 1024;
  static constexpr uint32_t kMaxHeadDim = 4096;

  // K and V scalars per token: 2 * n_layers * n_kv_heads * head_dim.
  uint64_t ScalarsPerToken() const { return 2ull * n_layers * n_kv_heads * head_dim; }
  // Scalars in one of K_l or V_l for `tokens` tokens.
  uint64_t ScalarsPerTensor(uint64_t tokens) const { return tokens * n_kv_heads * head_dim; }
  // Bytes of the data part of a chunk of `tokens` tokens.
  uint64_t DataBytes(uint64_t tokens) const { return tokens * ScalarsPerToken() * DTypeSize(dtype); }
  // Number of fp32 scales: 2 * n_layers for fp8_e4m3, else 0.
  uint64_t NumScales() const { return dtype == DType::kFP8E4M3 ? 2ull * n_layers : 0; }

  // InvalidArgument unless 1 <= each dim <= its bound and dtype is bf16, f16, f32 or
  // fp8_e4m3.
  Status Validate() const;
  bool operator==(const KvLayout&) const = default;
};

// Largest chunk accepted anywhere (tokens). Chunks are normally 256 tokens.
inline constexpr uint32_t kMaxChunkTokens = 1u << 20;

// Non-owning view of a chunk in the canonical layout. The viewed memory must outlive
// the view.
struct KvChunkView {
  KvLayout layout;
  uint32_t tokens = 0;
  std::span<const uint8_t> data;  // layout.DataBytes(tokens) bytes
  std::span<const float> scales;  // layout.NumScales() values

  // InvalidArgument if the layout is invalid, tokens is 0 or above kMaxChunkTokens,
  // or data/scales sizes disagree with the layout.
  Status Validate() const;
  // Bytes of K_l / V_l. REQUIRES: Validate() ok and l < n_layers.
  std::span<const uint8_t> K(uint32_t l) const;
  std::span<const uint8_t> V(uint32_t l) const;
  // XXH3-64 content checksum (see the file comment).
  uint64_t ContentChecksum() const;
};

// Owning chunk in the canonical layout.
struct KvChunk {
  KvLayout layout;
  uint32_t tokens = 0;
  std::vector<uint8_t> data;
  std::vector<float> scales;

  // A zero-filled chunk of the given shape (scales 1.0 for fp8).
  // REQUIRES: layout valid, 0 < tokens <= kMaxChunkTokens.
  static KvChunk Zeros(const KvLayout& layout, uint32_t tokens);

  KvChunkView view() const { return {layout, tokens, data, scales}; }
  std::span<uint8_t> MutableK(uint32_t l);
  std::span<uint8_t> MutableV(uint32_t l);
  Status Validate() const { return view().Validate(); }
  uint64_t ContentChecksum() const { return view().ContentChecksum(); }
};

// One named tensor of a recurrent state, stored byte-exact.
struct StateTensor {
  std::string name;  // e.g. "layers.3.delta_state"; 1..255 bytes
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;  // rank 1..8
  std::vector<uint8_t> data;    // product(shape) * DTypeSize(dtype) bytes

  static constexpr size_t kMaxRank = 8;
  static constexpr size_t kMaxNameBytes = 255;
  // InvalidArgument if the name, rank, dtype or data size is wrong.
  Status Validate() const;
  bool operator==(const StateTensor&) const = default;
};

// The recurrent state of a hybrid model at a chunk boundary.
struct RecurrentState {
  uint32_t boundary_tokens = 0;  // prefix length (tokens) at which this state holds
  std::vector<StateTensor> tensors;

  // Validates every tensor and that names are unique.
  Status Validate() const;
  // XXH3-64 over each tensor's name, dtype, shape and data in order.
  uint64_t ContentChecksum() const;
  uint64_t DataBytes() const;
  bool operator==(const RecurrentState&) const = default;
};

}  // namespace kvstash
