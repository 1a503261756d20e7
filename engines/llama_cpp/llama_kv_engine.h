// kvstash::llama_cpp::LlamaKvEngine: one sequence of a llama_context as a
// session::Engine (engines/session/engine.h), so the engine session drives llama.cpp.
// Prefill is llama_decode (Evaluate), ExportKv parses llama_state_seq_get_data
// (ExportSeqState + ParseSeqState), ImportKv rebuilds llama.cpp's sequence-state bytes
// (WriteSeqState), checks them field by field (ParseSeqState) and imports them
// (ImportSeqState).
//
// READ ME FIRST
// - Clear empties the whole memory (llama_memory_clear), not only the sequence: that
//   resets the cell head, so the next prompt's cells hold positions 0..n-1 in order,
//   the only form llama_state.h accepts. It is a prompt-prefill engine, not a
//   multi-sequence server.
// Ownership: owns its llama_context; the model must outlive it.
// Thread-safety: not thread-safe (llama.cpp contexts are single-threaded).
#pragma once

#include <llama.h>

#include <memory>

#include "engines/llama_cpp/llama_engine.h"
#include "engines/llama_cpp/llama_state.h"
#include "engines/session/engine.h"

namespace kvstash::llama_cpp {

class LlamaKvEngine final : public session::Engine {
 public:
  // A context of `params` for `model`, evaluating in sequence `seq_id`.
  // Errors: those of StateLayoutOf and NewContext; InvalidArgument for a null model or
  // a seq_id outside the context's sequences.
  static Result<std::unique_ptr<LlamaKvEngine>> Create(llama_model* model, const llama_context_params& params,
                                                       llama_seq_id seq_id);

  const KvLayout& kv_layout() const override { return layout_.kv; }
  uint32_t max_tokens() const override;
  void Clear() override;
  Result<std::vector<float>> Prefill(std::span<const uint32_t> tokens, uint32_t pos) override;
  Status ImportKv(std::span<const KvChunk> chunks, uint32_t tokens) override;
  Result<KvChunk> ExportKv() override;

  llama_context* context() const { return ctx_.get(); }
  const StateLayout& layout() const { return layout_; }

 private:
  LlamaKvEngine(ContextPtr ctx, StateLayout layout, llama_seq_id seq_id)
      : ctx_(std::move(ctx)), layout_(layout), seq_id_(seq_id) {}

  ContextPtr ctx_;
  StateLayout layout_;
  llama_seq_id seq_id_;
};

}  // namespace kvstash::llama_cpp
