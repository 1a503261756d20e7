// kvstash::llama_cpp::LlamaSession: prefix KV caching for one llama.cpp context
// (docs/architecture.md §9): the engine session (engines/session/engine_session.h) over
// a LlamaKvEngine (llama_kv_engine.h), with llama.cpp's token type and context
// parameters. Before a prompt is evaluated, the session LOOKs UP its chain on the
// kvstash servers; on a hit it GETs the matched chunks, verifies and decodes them
// (PrefixCodec::RestoreKvChunks), rebuilds llama.cpp's sequence-state bytes for the
// matched tokens (llama_state.h) and imports them with llama_state_seq_set_data, then
// evaluates only the rest of the prompt. Whatever the session evaluated and the store
// does not hold yet (the whole prompt on a miss, the unmatched chunks on a partial hit)
// is exported with llama_state_seq_get_data, cut into the chain's chunks and PUT by a
// background thread.
//
// READ ME FIRST
// - The load path never imports anything partial or unverified: every GET payload is
//   checked by the codec (payload header, codec checks, content checksum of the decoded
//   chunk), the rebuilt bytes are parsed back against the context's layout, and after
//   the import the sequence must hold exactly the matched positions. ANY failure on that
//   path (NotFound from a chunk evicted between LOOKUP and GET, a network error,
//   Corruption, Mismatch, llama.cpp refusing the bytes) clears the sequence and
//   recomputes the whole prompt: the call still succeeds, EvalResult::fallback says
//   why. Only failures of llama.cpp's own prefill are errors of the call.
// - At least the last prompt token is always evaluated (its logits are the result), so
//   a prompt that is entirely stored restores all but its last token.
// - The session uses one sequence (options.seq_id) of a context it creates and owns, and
//   clears it (llama_memory_clear) before each prompt: cells then hold positions 0..n-1
//   in order, the only form llama_state.h accepts. It is a prompt-prefill engine, not a
//   multi-sequence server.
// - Keys: ChainInputs::TokensOnly() (text prompts); a prompt whose KV depends on
//   something else (images, embeddings) must not use this session.
// - The chain covers the whole prompt by default, so its last chunk is usually partial
//   and holds the part that differs between requests (the question). A caller that
//   knows where its reusable prefix ends (system prompt + RAG document) passes
//   chain_tokens: the chain, the restore and the PUTs then cover tokens
//   [0, chain_tokens), and that prefix's own partial last chunk can hit too.
// - A hit is restored only when it pays: EvaluatePrompt asks the session's
//   RestoreCostModel (kvstash/restore_cost.h) whether restoring the matched tokens is
//   estimated faster than llama.cpp prefilling them; a declined hit runs as a miss
//   (EvalResult::declined, stats declined_hits). The model learns from this session's
//   own prefills, restores and encodes (PUT thread). RestoreHit called directly always
//   restores (it still reports the estimate).
// - PUTs run on a background thread in submission order; the queue holds at most
//   options.max_queued_puts prompts and a full queue makes the next miss WAIT (back-
//   pressure: a chain is never dropped silently). Put errors are counted and returned
//   by Flush(); they never fail an evaluation.
//
// Ownership: the session owns its llama_context and the PUT thread; `model` must
// outlive it; the Client and PrefixCodec are shared (thread-safe, immutable).
// Thread-safety: NOT thread-safe. One thread drives a session (llama.cpp contexts are
// single-threaded); distinct sessions may run concurrently. The destructor waits for
// queued PUTs (Flush) and joins the thread.
#pragma once

#include <llama.h>

#include <cstdint>
#include <memory>
#include <span>

#include "engines/llama_cpp/llama_kv_engine.h"
#include "engines/session/engine_session.h"
#include "engines/session/prefix_chunk_codec.h"
#include "kvstash/client.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/restore_cost.h"
#include "kvstash/result.h"

namespace kvstash::llama_cpp {

struct LlamaSessionOptions {
  // The llama.cpp sequence the session evaluates prompts in. Default: 0.
  llama_seq_id seq_id = 0;
  // Prompts whose chunks may wait for the PUT thread. Default: 4.
  uint32_t max_queued_puts = 4;
  // Deadline etc. of the session's LOOKUP/GET/PUT calls. Default: the client's.
  CallOptions call;
  // The restore cost model (READ ME FIRST); sessions of one engine may share one.
  // Default (null): the session makes its own with `restore_cost`.
  std::shared_ptr<RestoreCostModel> cost_model;
  RestoreCostOptions restore_cost;
};

// What the session found on the servers for a prompt (Lookup).
using LlamaLookup = session::ChainLookup;
// The outcome of one prompt (logits: llama_vocab_n_tokens floats).
using EvalResult = session::EvalResult;
// Counters over the session's life.
using LlamaSessionStats = session::SessionStats;

class LlamaSession {
 public:
  // Creates the context from `params` (see StateLayoutOf for what is refused; the
  // codec's layout() must be the context's KV layout and dtype, else InvalidArgument).
  // Errors: those of StateLayoutOf and NewContext; InvalidArgument for a null model,
  // client or codec, or max_queued_puts 0.
  static Result<std::unique_ptr<LlamaSession>> Create(llama_model* model, const llama_context_params& params,
                                                      std::shared_ptr<Client> client,
                                                      std::shared_ptr<const PrefixCodec> codec,
                                                      LlamaSessionOptions options = {});

  // The whole step: Lookup, then RestoreHit when something matched, else PrefillMiss.
  // chain_tokens: the reusable prefix the chain covers (see READ ME FIRST); 0 = the
  // whole prompt. Errors: InvalidArgument for an empty prompt, one longer than the
  // context, or chain_tokens > tokens.size(); llama.cpp prefill failures (Unavailable);
  // a failed LOOKUP is a miss (fallback set).
  Result<EvalResult> EvaluatePrompt(std::span<const llama_token> tokens, uint32_t chain_tokens = 0);

  // The steps, for callers that time or report them separately (the demo).
  // LOOKUP of the chain of tokens [0, chain_tokens) (0 = all). Errors: InvalidArgument
  // for an empty prompt or chain_tokens > tokens.size(); the client's errors.
  Result<LlamaLookup> Lookup(std::span<const llama_token> tokens, uint32_t chain_tokens = 0);
  // Clears the sequence, evaluates the whole prompt and queues the PUT of the chain
  // chunks not stored. `lookup` is Lookup's answer for these tokens.
  // Errors: those of EvaluatePrompt; InvalidArgument for a lookup of another prompt.
  Result<EvalResult> PrefillMiss(std::span<const llama_token> tokens, const LlamaLookup& lookup);
  // Restores lookup.matched_chunks chunks (all but the last prompt token at most),
  // evaluates the rest and queues the PUT of the chunks not stored. Falls back to
  // PrefillMiss on any load-path failure (see READ ME FIRST).
  Result<EvalResult> RestoreHit(std::span<const llama_token> tokens, const LlamaLookup& lookup);

  // The cost model's estimate for restoring `lookup`'s matched tokens of a prompt of
  // `prompt_tokens` tokens (at most prompt_tokens - 1: the last one is evaluated).
  RestoreEstimate EstimateRestore(const LlamaLookup& lookup, size_t prompt_tokens) const {
    return session_->EstimateRestore(lookup, prompt_tokens);
  }
  RestoreCostModel& cost_model() const { return session_->cost_model(); }

  // Waits until every queued PUT has finished. Returns the first PUT error since the
  // previous Flush (Ok when none).
  Status Flush() { return session_->Flush(); }

  llama_context* context() const { return engine_->context(); }
  const StateLayout& layout() const { return engine_->layout(); }
  const PrefixCodec& codec() const { return *codec_; }
  LlamaSessionStats stats() const { return session_->stats(); }

 private:
  LlamaSession(LlamaKvEngine* engine, std::shared_ptr<const PrefixCodec> codec,
               std::unique_ptr<session::EngineSession> session)
      : engine_(engine), codec_(std::move(codec)), session_(std::move(session)) {}

  LlamaKvEngine* engine_;                     // owned by session_
  std::shared_ptr<const PrefixCodec> codec_;  // the session's (as its PrefixChunkCodec)
  std::unique_ptr<session::EngineSession> session_;
};

}  // namespace kvstash::llama_cpp
