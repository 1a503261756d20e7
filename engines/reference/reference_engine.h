// kvstash::reference::ReferenceEngine: the reference runtime (model/forward) as a
// session::Engine (engines/session/engine.h), so the engine session drives it: one
// fp32 model::KvCache as the sequence, model::Prefill as its prefill, and the cache's
// KV in a KV dtype (the codec's) across the interface.
//
// READ ME FIRST
// - Export rounds the fp32 cache to kv_dtype (model::ToKvChunk); import widens the
//   chunks back to fp32 (model::FromKvChunk): after a restore the cache holds exactly
//   the values the codec decoded, as an engine with a kv_dtype cache would.
// - max_tokens is unbounded (uint32 max): the cache grows with the sequence.
// Ownership: the model must outlive the engine.
// Thread-safety: not thread-safe (one sequence, one driver thread).
#pragma once

#include "engines/session/engine.h"
#include "model/forward/kv_cache.h"
#include "model/forward/model.h"

namespace kvstash::reference {

class ReferenceEngine final : public session::Engine {
 public:
  // An empty sequence of `model`, exchanging KV in `kv_dtype`.
  ReferenceEngine(const model::Model& model, DType kv_dtype);

  const KvLayout& kv_layout() const override { return layout_; }
  uint32_t max_tokens() const override;
  void Clear() override;
  // Errors: InvalidArgument when pos is not the cache's length; model::Prefill's.
  Result<std::vector<float>> Prefill(std::span<const uint32_t> tokens, uint32_t pos) override;
  // Errors: model::FromKvChunk's and AppendKv's (a chunk of another shape);
  // InvalidArgument when the chunks do not hold `tokens` tokens.
  Status ImportKv(std::span<const KvChunk> chunks, uint32_t tokens) override;
  Result<KvChunk> ExportKv() override;

  // The fp32 cache of the sequence: for generation and checks after a prompt
  // (model::Prefill on it continues the sequence).
  model::KvCache& cache() { return cache_; }

 private:
  const model::Model& model_;
  KvLayout layout_;
  model::KvCache cache_;
};

}  // namespace kvstash::reference
