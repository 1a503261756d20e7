// ModelConfig: the hyper-parameters of a decoder-only transformer our runtime runs.
//
// Supported architectures (all pre-norm, RMSNorm, SwiGLU MLP, grouped-query
// attention, rotary position embedding in the "rotate_half" layout of Hugging Face
// transformers, i.e. channel i pairs with channel i + head_dim/2):
//   kLlama  Llama / SmolLM2 / llama2.c checkpoints.
//   kQwen3  Llama plus per-head RMSNorm of q and k over head_dim before RoPE
//           ("QK-norm"), and an explicit head_dim.
//   kQwen2  Llama plus additive biases on the q, k and v projections (Hugging Face
//           Qwen2Attention: q/k/v_proj have bias=True, o_proj none), no QK-norm;
//           Qwen2 / Qwen2.5 / Qwen2.5-Coder. llama.cpp runs it with NEOX RoPE
//           (llama-model.cpp llama_model_rope_type: LLM_ARCH_QWEN2 -> NEOX), which
//           is this rotate_half layout, so its GGUF q/k rows are not permuted.
// Loaders that read checkpoints stored in the interleaved RoPE layout (GGUF llama,
// llama2.c) permute the q/k projection rows at load time, so K rows that the runtime
// exports are always in Hugging Face's channel order, as inference engines cache them.
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvstash/status.h"

namespace kvstash::model {

enum class Architecture : uint8_t { kLlama = 1, kQwen3 = 2, kQwen2 = 3 };

std::string_view ArchitectureName(Architecture a);

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  uint32_t n_layers = 0;      // transformer blocks (all are attention layers)
  uint32_t hidden = 0;        // residual width
  uint32_t n_heads = 0;       // query heads
  uint32_t n_kv_heads = 0;    // key/value heads; n_heads % n_kv_heads == 0
  uint32_t head_dim = 0;      // channels per head; even
  uint32_t ffn_hidden = 0;    // SwiGLU inner width
  uint32_t vocab_size = 0;
  uint32_t max_positions = 0; // context length the weights were trained for (0: unknown)
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // lm_head shares the token embedding matrix

  // Upper bounds Validate() enforces; far above models we run, low enough that
  // products of dimensions fit in 64-bit sizes.
  static constexpr uint32_t kMaxLayers = 1024;
  static constexpr uint32_t kMaxWidth = 1 << 17;
  static constexpr uint32_t kMaxVocab = 1 << 22;

  uint32_t q_dim() const { return n_heads * head_dim; }
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }
  bool qk_norm() const { return arch == Architecture::kQwen3; }
  // q, k and v projections carry biases (LayerWeights::bq/bk/bv).
  bool qkv_bias() const { return arch == Architecture::kQwen2; }

  // InvalidArgument with the reason if a dimension is 0 or out of bounds, heads do
  // not divide, head_dim is odd, or theta/eps are not finite and positive.
  Status Validate() const;
  std::string ToString() const;
};

}  // namespace kvstash::model
