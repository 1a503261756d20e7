// KvCache: the fp32 KV cache of a token prefix for every attention layer of a model.
//
// Layout per layer l: k[l] and v[l] are [tokens, n_kv_heads, head_dim] row-major
// fp32; keys are after RoPE (as engines cache them) in Hugging Face's rotate_half
// channel order. This is the in-memory form the forward pass reads and appends to;
// model/forward/kv_export.h converts it to and from the canonical KvChunk (bf16 / fp8).
//
// Thread-safety: a value type; a cache being appended to by a forward pass must not
// be read concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "kvstash/result.h"
#include "model/forward/model_config.h"

namespace kvstash::model {

struct KvCache {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  uint32_t tokens = 0;
  std::vector<std::vector<float>> k, v;

  // An empty cache shaped for `config`.
  static KvCache ForModel(const ModelConfig& config);

  uint64_t RowFloats() const { return static_cast<uint64_t>(n_kv_heads) * head_dim; }
  // InvalidArgument unless the shape equals the model's and every tensor holds
  // tokens * RowFloats() values.
  Status CheckFor(const ModelConfig& config) const;
  // The first n tokens. InvalidArgument if n > tokens.
  Result<KvCache> Prefix(uint32_t n) const;
};

}  // namespace kvstash::model
