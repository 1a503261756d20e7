#include "model/forward/generate.h"

#include <string>

#include "model/forward/prefill.h"

namespace kvstash::model {

uint32_t Argmax(std::span<const float> v) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

Result<std::vector<uint32_t>> GenerateGreedy(const Model& model, std::span<const uint32_t> prompt, KvCache* cache,
                                             const GenerateOptions& options) {
  if (cache == nullptr) return Status::InvalidArgument("generate: null cache");
  KVSTASH_RETURN_IF_ERROR(cache->CheckFor(model.config));
  if (cache->tokens >= prompt.size()) {
    return Status::InvalidArgument("generate: the cache holds " + std::to_string(cache->tokens) +
                                   " tokens; at least one prompt token must remain to prefill (prompt has " +
                                   std::to_string(prompt.size()) + ")");
  }
  std::optional<uint32_t> eos = options.eos_id;
  if (!eos && model.tokenizer != nullptr) eos = model.tokenizer->eos_id();
  std::vector<uint32_t> out;
  if (options.max_new_tokens == 0) return out;
  PrefillOptions po;
  po.logits = PrefillOptions::Logits::kLast;
  KVSTASH_ASSIGN_OR_RETURN(PrefillResult r, Prefill(model, prompt.subspan(cache->tokens), cache, po));
  while (true) {
    const uint32_t next = Argmax(r.logits);
    out.push_back(next);
    if (out.size() >= options.max_new_tokens || (options.stop_at_eos && eos && next == *eos)) break;
    const uint32_t one[1] = {next};
    KVSTASH_ASSIGN_OR_RETURN(r, Prefill(model, one, cache, po));
  }
  return out;
}

}  // namespace kvstash::model
