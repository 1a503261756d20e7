#include "engines/llama_cpp/llama_kv_engine.h"

#include <utility>

namespace kvstash::llama_cpp {

Result<std::unique_ptr<LlamaKvEngine>> LlamaKvEngine::Create(llama_model* model,
                                                             const llama_context_params& params,
                                                             llama_seq_id seq_id) {
  if (model == nullptr) return Status::InvalidArgument("LlamaKvEngine needs a model");
  if (seq_id < 0 || static_cast<uint32_t>(seq_id) >= params.n_seq_max) {
    return Status::InvalidArgument("seq_id outside the context's sequences");
  }
  KVSTASH_ASSIGN_OR_RETURN(StateLayout layout, StateLayoutOf(model, params));
  KVSTASH_ASSIGN_OR_RETURN(ContextPtr ctx, NewContext(model, params));
  return std::unique_ptr<LlamaKvEngine>(new LlamaKvEngine(std::move(ctx), layout, seq_id));
}

uint32_t LlamaKvEngine::max_tokens() const { return llama_n_ctx(ctx_.get()); }

void LlamaKvEngine::Clear() { llama_memory_clear(llama_get_memory(ctx_.get()), true); }

Result<std::vector<float>> LlamaKvEngine::Prefill(std::span<const uint32_t> tokens, uint32_t pos) {
  const std::vector<llama_token> ids(tokens.begin(), tokens.end());
  return Evaluate(ctx_.get(), ids, static_cast<llama_pos>(pos), seq_id_);
}

Status LlamaKvEngine::ImportKv(std::span<const KvChunk> chunks, uint32_t tokens) {
  Clear();
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> state, WriteSeqState(layout_, seq_id_, chunks));
  // The bytes handed to llama.cpp pass the same field-by-field check as an export.
  KVSTASH_RETURN_IF_ERROR(ParseSeqState(state, layout_).status().WithContext("rebuilt state"));
  const Status imp = ImportSeqState(ctx_.get(), state, tokens, seq_id_);
  if (!imp.ok()) {
    Clear();
    return imp.WithContext("import");
  }
  return Status::Ok();
}

Result<KvChunk> LlamaKvEngine::ExportKv() {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ExportSeqState(ctx_.get(), seq_id_));
  KVSTASH_ASSIGN_OR_RETURN(SeqState state, ParseSeqState(bytes, layout_));
  return std::move(state.kv);
}

}  // namespace kvstash::llama_cpp
