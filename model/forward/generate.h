// Greedy decoding on top of Prefill, continuing a (possibly restored) KV cache.
//
// GenerateGreedy(model, prompt, &cache, opts): `cache` holds the KV of the first P
// tokens of `prompt` (P = 0 for a cold start, P > 0 for a cache hit), P <
// prompt.size(). The remaining prompt tokens are prefilled in one batch, then up to
// max_new_tokens tokens are chosen one at a time by argmax of the logits (lowest id on
// ties, as torch.argmax), each fed back through a one-token Prefill. Stops early after
// emitting EOS when stop_at_eos and the tokenizer (or opts.eos_id) defines one.
// On return the cache holds the prompt and every generated token but the last.
//
// Errors: InvalidArgument if P >= prompt.size() or the cache is shaped for another
// model; Prefill's errors otherwise.
// Thread-safety: as Prefill.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/forward/kv_cache.h"
#include "model/forward/model.h"

namespace kvstash::model {

struct GenerateOptions {
  uint32_t max_new_tokens = 32;      // Default: 32.
  bool stop_at_eos = true;           // Default: true.
  std::optional<uint32_t> eos_id;    // Default: the tokenizer's EOS, if any.
};

// Index of the largest value (first on ties). REQUIRES: !v.empty().
uint32_t Argmax(std::span<const float> v);

Result<std::vector<uint32_t>> GenerateGreedy(const Model& model, std::span<const uint32_t> prompt, KvCache* cache,
                                             const GenerateOptions& options = {});

}  // namespace kvstash::model
