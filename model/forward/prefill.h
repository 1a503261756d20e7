// Prefill: the fp32 CPU forward pass of a model over a batch of new tokens that
// continue a KV cache, exporting the KV cache and the logits.
//
// Prefill(model, tokens, &cache, opts) runs tokens [P, P + T) where P = cache.tokens
// (0 for a fresh prompt; a restored cache for a cache hit). It appends the new
// tokens' K (after RoPE) and V of every layer to `cache`, so afterwards the cache
// holds P + T tokens, and returns the logits and, on request, K before RoPE. With
// the exact cache of the first P tokens, the result equals that of a full prefill
// over all P + T tokens up to fp32 rounding of the differently-shaped GEMMs.
//
// Per layer (Hugging Face LlamaDecoderLayer / Qwen3DecoderLayer / Qwen2DecoderLayer):
//   h = RmsNorm(x); q = h Wq^T; k = h Wk^T; v = h Wv^T
//   [Qwen2: q += bq, k += bk, v += bv]
//   [Qwen3: q, k = per-head RmsNorm(q_norm / k_norm)]   <- "K before RoPE" is here
//   q, k = RoPE(q, k, positions P..P+T-1); cache += (k, v)
//   x += Attention(q, cache) Wo^T; x += Wdown(silu(h2 Wgate^T) * (h2 Wup^T)), h2 = RmsNorm(x)
// then logits = RmsNorm(x) lm_head^T for the requested rows.
//
// Errors: InvalidArgument for zero tokens, a token id >= vocab_size, a cache shaped
// for another model, or P + T above the model's max_positions (when known).
// Thread-safety: concurrent calls on one Model are safe with distinct caches.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/result.h"
#include "model/forward/kv_cache.h"
#include "model/forward/model.h"

namespace kvstash::model {

// Longest sequence (cached + new tokens) a prefill accepts.
inline constexpr uint32_t kMaxPositions = 1u << 20;

struct PrefillOptions {
  enum class Logits : uint8_t {
    kNone,  // no logits (KV export only; skips the vocab projection)
    kLast,  // the last new token's row only
    kAll,   // one row per new token
  };
  Logits logits = Logits::kLast;  // Default: kLast.
  bool keep_pre_rope_k = false;   // also return K before RoPE. Default: false.
};

struct PrefillResult {
  uint32_t first_position = 0;  // P
  uint32_t tokens = 0;          // T
  // Per layer [T, n_kv_heads, head_dim] fp32 when keep_pre_rope_k, else empty.
  std::vector<std::vector<float>> k_pre_rope;
  uint32_t logit_rows = 0;      // 0, 1 or T
  std::vector<float> logits;    // [logit_rows, vocab_size]
};

Result<PrefillResult> Prefill(const Model& model, std::span<const uint32_t> tokens, KvCache* cache,
                              const PrefillOptions& options = {});

}  // namespace kvstash::model
