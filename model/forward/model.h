// Model: a loaded decoder-only transformer: config, fp32 weights (quantised files are
// dequantised at load time), and the tokenizer when the file carries one.
//
// Weight shapes (row-major fp32; D = hidden, Hq = q_dim, Hkv = kv_dim, F = ffn_hidden):
//   embed [vocab, D]; per layer: attn_norm [D], wq [Hq, D], wk [Hkv, D], wv [Hkv, D],
//   wo [D, Hq], q_norm/k_norm [head_dim] (Qwen3 only, else empty), bq [Hq], bk [Hkv],
//   bv [Hkv] (Qwen2 only: added after the projection, before RoPE; else empty), ffn_norm [D],
//   w_gate [F, D], w_up [F, D], w_down [D, F]; final_norm [D]; lm_head [vocab, D]
//   (shares the embedding buffer when tied_embeddings).
// q/k rows are in Hugging Face's rotate_half channel order (see model_config.h).
//
// Use LoadModel (model/formats/model_loader.h) to build one from a file.
// Thread-safety: immutable after loading; any number of forward passes may run on
// one Model concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/forward/linear.h"
#include "model/forward/model_config.h"
#include "model/tokenizers/tokenizer.h"

namespace kvstash::model {

struct LayerWeights {
  std::vector<float> attn_norm;
  std::unique_ptr<Linear> wq, wk, wv, wo;
  std::vector<float> q_norm, k_norm;
  std::vector<float> bq, bk, bv;  // q/k/v projection biases (config.qkv_bias()), else empty
  std::vector<float> ffn_norm;
  std::unique_ptr<Linear> w_gate, w_up, w_down;
};

// One projection as the GGUF file stores it (ggml blocks, rows in the file's order:
// for llama q/k that is the interleaved RoPE order, before InterleavedToHalfSplit).
// Kept for predictors that reproduce ggml's arithmetic (numerics/ggml_ops.h).
struct GgmlTensor {
  uint32_t type = 0;  // ggml type id (model/formats/ggml_types.h)
  uint32_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // rows x RowBytes(type, cols)
};
struct GgmlLayerTensors {
  GgmlTensor wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct Model {
  ModelConfig config;
  std::shared_ptr<const std::vector<float>> embed;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  std::unique_ptr<Linear> lm_head;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the file has none
  std::string source;                    // "gguf", "safetensors" or "llama2c"
  // Per layer, the projections as stored in the GGUF file; empty for other sources.
  std::vector<GgmlLayerTensors> ggml_layers;

  // InvalidArgument naming the first weight whose shape disagrees with the config.
  Status Validate() const;
};

// Builds a DenseLinear from a [out, in] buffer; InvalidArgument (naming `what`) if
// the size is wrong.
Result<std::unique_ptr<Linear>> MakeDense(std::vector<float> w, uint32_t out, uint32_t in,
                                          const std::string& what);

// Reorders the rows of a q or k projection [n_heads * head_dim, in] from the
// interleaved RoPE layout (pairs 2i, 2i+1: GGUF llama, llama2.c) to the rotate_half
// layout (pairs i, i + head_dim/2: Hugging Face). This undoes llama.cpp's
// convert_hf_to_gguf.py `permute`. REQUIRES: w.size() == n_heads * head_dim * in.
std::vector<float> InterleavedToHalfSplit(const std::vector<float>& w, uint32_t n_heads,
                                          uint32_t head_dim, uint32_t in);

}  // namespace kvstash::model
