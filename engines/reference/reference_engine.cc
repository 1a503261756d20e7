#include "engines/reference/reference_engine.h"

#include <limits>
#include <string>

#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"

namespace kvstash::reference {

ReferenceEngine::ReferenceEngine(const model::Model& model, DType kv_dtype)
    : model_(model),
      layout_{model.config.n_layers, model.config.n_kv_heads, model.config.head_dim, kv_dtype},
      cache_(model::KvCache::ForModel(model.config)) {}

uint32_t ReferenceEngine::max_tokens() const { return std::numeric_limits<uint32_t>::max(); }

void ReferenceEngine::Clear() { cache_ = model::KvCache::ForModel(model_.config); }

Result<std::vector<float>> ReferenceEngine::Prefill(std::span<const uint32_t> tokens, uint32_t pos) {
  if (pos != cache_.tokens) {
    return Status::InvalidArgument("prefill at position " + std::to_string(pos) + " of a sequence of " +
                                   std::to_string(cache_.tokens) + " tokens");
  }
  KVSTASH_ASSIGN_OR_RETURN(model::PrefillResult r, model::Prefill(model_, tokens, &cache_));
  return std::move(r.logits);
}

Status ReferenceEngine::ImportKv(std::span<const KvChunk> chunks, uint32_t tokens) {
  Clear();
  Status st;
  for (const KvChunk& c : chunks) {
    auto part = model::FromKvChunk(c.view());
    st = part.ok() ? model::AppendKv(*part, &cache_) : part.status();
    if (!st.ok()) break;
  }
  if (st.ok() && cache_.tokens != tokens) {
    st = Status::InvalidArgument("imported chunks hold " + std::to_string(cache_.tokens) + " tokens, not " +
                                 std::to_string(tokens));
  }
  if (!st.ok()) Clear();
  return st;
}

Result<KvChunk> ReferenceEngine::ExportKv() {
  return model::ToKvChunk(cache_, 0, cache_.tokens, layout_.dtype);
}

}  // namespace kvstash::reference
