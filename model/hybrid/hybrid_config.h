// Shape of a Qwen3.5-style hybrid model (Hugging Face `qwen3_5_text`,
// transformers.Qwen3_5TextConfig), parsed from its config.json.
//
// Layer l is a Gated DeltaNet layer ("linear_attention") or a gated full-attention
// layer ("full_attention") per `layer_types`; every layer has a dense SwiGLU MLP.
// Defaults are transformers' where a key may be absent (partial_rotary_factor 0.25,
// layer_types from full_attention_interval 4, tie_word_embeddings false).
//
// Thread-safety: a plain value and a pure function.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::hybrid {

enum class LayerKind : uint8_t { kLinearAttention, kFullAttention };

struct HybridConfig {
  uint32_t vocab_size = 0;
  uint32_t hidden_size = 0;        // D, residual stream width
  uint32_t intermediate_size = 0;  // MLP hidden width
  std::vector<LayerKind> layer_types;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;  // lm_head = embed_tokens when true
  // Full attention (gated, GQA).
  uint32_t num_attention_heads = 0;
  uint32_t num_key_value_heads = 0;
  uint32_t head_dim = 0;
  uint32_t rotary_dim = 0;  // int(head_dim * partial_rotary_factor), even, <= head_dim
  float rope_theta = 10000.0f;
  // Gated DeltaNet.
  uint32_t conv_kernel = 0;   // linear_conv_kernel_dim
  uint32_t num_k_heads = 0;   // linear_num_key_heads
  uint32_t num_v_heads = 0;   // linear_num_value_heads (a multiple of num_k_heads)
  uint32_t head_k_dim = 0;    // linear_key_head_dim
  uint32_t head_v_dim = 0;    // linear_value_head_dim

  uint32_t num_layers() const { return static_cast<uint32_t>(layer_types.size()); }
  uint32_t key_dim() const { return num_k_heads * head_k_dim; }
  uint32_t value_dim() const { return num_v_heads * head_v_dim; }
  // Channels of the short convolution: q, k and v concatenated (2 key_dim + value_dim).
  uint32_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  uint32_t num_attention_layers() const;
  bool operator==(const HybridConfig&) const = default;
};

// Parses config.json text. Accepts model_type "qwen3_5_text" (a Qwen3_5TextConfig),
// or "qwen3_5" whose "text_config" is one.
// Errors: InvalidArgument for malformed JSON, a missing / non-numeric / zero required
// key, layer_types of the wrong length or with an unknown kind, heads that do not
// divide (num_attention_heads % num_key_value_heads, num_v_heads % num_k_heads), an
// odd or oversized rotary dim; NotSupported for another model_type (Qwen3-Next's
// interleaved in_proj_qkvz, MoE variants), hidden_act other than silu, attention
// bias, a rope_type other than "default".
Result<HybridConfig> ParseHybridConfig(std::string_view json_text);

}  // namespace kvstash::hybrid
