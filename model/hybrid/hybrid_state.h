// The per-request state of a hybrid model (model/hybrid/hybrid_model.h) and its exact
// export to / import from what kvstash stores: the attention layers' KV as canonical
// chunks (kvstash/kv_chunk.h) and the linear layers' recurrent state as named tensors
// (RecurrentState, serialised by EncodeStateRecord).
//
// State after `tokens` tokens, all fp32:
//   attention layer l:  keys, values  [tokens, n_kv_heads, head_dim]  K after k_norm
//                       and RoPE (what transformers caches), V as projected
//   linear layer l:     layers.<l>.conv_state  [conv_dim, conv_kernel - 1]
//                         the last conv_kernel - 1 pre-convolution q|k|v inputs,
//                         oldest first along the last axis (zeros before the first
//                         token). transformers' cache holds conv_kernel columns; its
//                         first column is never read, so it is not stored.
//                       layers.<l>.delta_state [num_v_heads, head_k_dim, head_v_dim]
//                         S[h][i][j], i = key channel, j = value channel, the
//                         transformers layout (o = S^T q, S += k (beta (v - S^T k))^T)
// The recurrent tensors are exported in layer order, conv_state before delta_state;
// RecurrentState::boundary_tokens is `tokens`. KV chunks use the layout
// {num_attention_layers, num_key_value_heads, head_dim, f32}: exporting and importing
// copy fp32 bit patterns, so continuing from an imported state is bit-identical to
// never stopping.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"
#include "model/hybrid/hybrid_config.h"

namespace kvstash::hybrid {

struct HybridLayerState {
  // Linear-attention layers (empty for attention layers).
  std::vector<float> conv;   // [conv_dim * (conv_kernel - 1)], channel-major
  std::vector<float> delta;  // [num_v_heads * head_k_dim * head_v_dim]
  // Full-attention layers (empty for linear layers).
  std::vector<float> keys;    // [tokens * n_kv_heads * head_dim]
  std::vector<float> values;  // same
  bool operator==(const HybridLayerState&) const = default;
};

struct HybridState {
  uint32_t tokens = 0;  // tokens consumed (the next token's position)
  std::vector<HybridLayerState> layers;  // one per model layer

  // The state before any token (zero conv and delta states, empty caches).
  static HybridState Empty(const HybridConfig& config);
  // InvalidArgument unless the layer count and every vector size match `config` and
  // `tokens`.
  Status CheckShape(const HybridConfig& config) const;
};

// The KV layout of exported chunks: {num_attention_layers, num_key_value_heads,
// head_dim, f32}. REQUIRES: the config has at least one attention layer.
KvLayout HybridKvLayout(const HybridConfig& config);

// Tensor names of linear layer l: "layers.<l>.conv_state", "layers.<l>.delta_state".
std::string ConvStateName(uint32_t layer);
std::string DeltaStateName(uint32_t layer);

// KV of tokens [begin, end) of every attention layer as one canonical f32 chunk.
// Errors: InvalidArgument for a bad shape, a model without attention layers, or not
// begin < end <= state.tokens (or a chunk above kMaxChunkTokens).
Result<KvChunk> ExportKvChunk(const HybridConfig& config, const HybridState& state,
                              uint32_t begin, uint32_t end);

// The linear layers' recurrent state (layout above).
// Errors: InvalidArgument for a bad shape.
Result<RecurrentState> ExportRecurrentState(const HybridConfig& config,
                                            const HybridState& state);

// Rebuilds the state at boundary `recurrent.boundary_tokens` from the KV chunks of
// tokens [0, boundary) in order and the recurrent tensors (any order, exactly the
// 2 * n_linear names above, f32, documented shapes).
// Errors: InvalidArgument for a chunk of another layout, chunks that do not cover
// exactly [0, boundary), a missing / extra / duplicate / misshapen tensor or a dtype
// other than f32.
Result<HybridState> ImportState(const HybridConfig& config, std::span<const KvChunk> chunks,
                                const RecurrentState& recurrent);

}  // namespace kvstash::hybrid
