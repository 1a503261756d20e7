#include "engines/llama_cpp/llama_session.h"

#include <utility>
#include <vector>

namespace kvstash::llama_cpp {
namespace {

std::vector<uint32_t> AsU32(std::span<const llama_token> tokens) {
  return std::vector<uint32_t>(tokens.begin(), tokens.end());
}

}  // namespace

Result<std::unique_ptr<LlamaSession>> LlamaSession::Create(llama_model* model,
                                                           const llama_context_params& params,
                                                           std::shared_ptr<Client> client,
                                                           std::shared_ptr<const PrefixCodec> codec,
                                                           LlamaSessionOptions options) {
  if (model == nullptr || !client || !codec) {
    return Status::InvalidArgument("LlamaSession needs a model, a client and a codec");
  }
  if (options.max_queued_puts == 0) return Status::InvalidArgument("max_queued_puts must be > 0");
  KVSTASH_RETURN_IF_ERROR(ValidateRestoreCostOptions(options.restore_cost));
  KVSTASH_ASSIGN_OR_RETURN(std::unique_ptr<LlamaKvEngine> engine,
                           LlamaKvEngine::Create(model, params, options.seq_id));
  LlamaKvEngine* raw = engine.get();
  session::SessionOptions so;
  so.max_queued_puts = options.max_queued_puts;
  so.call = options.call;
  so.cost_model = std::move(options.cost_model);
  so.restore_cost = options.restore_cost;
  auto chunk_codec = std::make_shared<const session::PrefixChunkCodec>(codec);
  KVSTASH_ASSIGN_OR_RETURN(auto session, session::EngineSession::Create(std::move(engine), std::move(client),
                                                                        std::move(chunk_codec), so));
  return std::unique_ptr<LlamaSession>(new LlamaSession(raw, std::move(codec), std::move(session)));
}

Result<EvalResult> LlamaSession::EvaluatePrompt(std::span<const llama_token> tokens, uint32_t chain_tokens) {
  return session_->EvaluatePrompt(AsU32(tokens), chain_tokens);
}

Result<LlamaLookup> LlamaSession::Lookup(std::span<const llama_token> tokens, uint32_t chain_tokens) {
  return session_->Lookup(AsU32(tokens), chain_tokens);
}

Result<EvalResult> LlamaSession::PrefillMiss(std::span<const llama_token> tokens, const LlamaLookup& lookup) {
  return session_->PrefillMiss(AsU32(tokens), lookup);
}

Result<EvalResult> LlamaSession::RestoreHit(std::span<const llama_token> tokens, const LlamaLookup& lookup) {
  return session_->RestoreHit(AsU32(tokens), lookup);
}

}  // namespace kvstash::llama_cpp
