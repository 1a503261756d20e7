// kvstash::session::EngineSession: prefix KV caching for one engine sequence
// (docs/architecture.md §9), over the small Engine interface (engine.h). Before a prompt
// is evaluated, the session LOOKs UP its chain on the kvstash servers; on a hit it GETs
// the matched chunks, verifies and decodes them (ChunkCodec::Restore, chunk_codec.h),
// imports them into the engine (Engine::ImportKv), then evaluates only the rest of the
// prompt.
// Whatever the session evaluated and the store does not hold yet (the whole prompt on
// a miss, the unmatched chunks on a partial hit) is exported (Engine::ExportKv), cut
// into the chain's chunks and PUT by a background thread. llama.cpp's LlamaSession
// (engines/llama_cpp/llama_session.h) and the demo's passes (demo/demo_session_pass.h:
// the reference runtime, llama.cpp, the hybrid runtime) are this session over their
// engines.
//
// READ ME FIRST
// - The load path never imports anything partial or unverified: every GET payload is
//   checked by the codec (payload header, codec checks, content checksum of the decoded
//   chunk) and the engine checks what it imports. ANY failure on that path (NotFound
//   from a chunk evicted between LOOKUP and GET, a network error, Corruption, Mismatch,
//   the engine refusing the KV) clears the sequence and recomputes the whole prompt: the
//   call still succeeds, EvalResult::fallback says why. Only failures of the engine's
//   own prefill are errors of the call.
// - At least the last prompt token is always evaluated (its logits are the result), so
//   a prompt that is entirely stored restores all but its last token.
// - Keys: the codec's ChainKeys of the tokens (text prompts); a prompt whose KV depends
//   on something else (images, embeddings) must not use this session.
// - Recurrent state (an engine with has_state(), a codec with stores_state(): both or
//   neither): the LOOKUP requires a state (the longest stored prefix ending at a chunk
//   that carries one), the last matched chunk is fetched with its state record, and the
//   engine imports the KV with that state (Engine::ImportKvAndState); a record whose
//   boundary is not the restored length is a load failure (recompute). Before every
//   prefill the engine is asked to keep its state at the ends of the chunks still to be
//   PUT that carry one (ChunkCodec::StateAfterChunk); the PUT sends them as records.
// - The chain covers the whole prompt by default, so its last chunk is usually partial
//   and holds the part that differs between requests (the question). A caller that
//   knows where its reusable prefix ends (system prompt + RAG document) passes
//   chain_tokens: the chain, the restore and the PUTs then cover tokens
//   [0, chain_tokens), and that prefix's own partial last chunk can hit too.
// - A hit is restored only when it pays: EvaluatePrompt asks the session's
//   RestoreCostModel (kvstash/restore_cost.h) whether restoring the matched tokens is
//   estimated faster than the engine prefilling them; a declined hit runs as a miss
//   (EvalResult::declined, stats declined_hits). The model learns from this session's
//   own prefills, restores and encodes (PUT thread). RestoreHit called directly always
//   restores (it still reports the estimate).
// - PUTs run on a background thread in submission order; the queue holds at most
//   options.max_queued_puts prompts and a full queue makes the next miss WAIT (back-
//   pressure: a chain is never dropped silently). Put errors are counted and returned
//   by Flush(); they never fail an evaluation.
//
// Ownership: the session owns its engine and the PUT thread; the Client and ChunkCodec
// are shared (the Client thread-safe, the codec as chunk_codec.h says).
// Thread-safety: NOT thread-safe. One thread drives a session (and its engine);
// distinct sessions may run concurrently. The destructor waits for queued PUTs (Flush)
// and joins the thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "engines/session/chunk_codec.h"
#include "engines/session/engine.h"
#include "kvstash/client.h"
#include "kvstash/restore_cost.h"
#include "kvstash/result.h"

namespace kvstash::session {

struct SessionOptions {
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
struct ChainLookup {
  std::vector<ChunkKey> keys;   // the chain of tokens [0, chain_tokens) (ChainKeys)
  uint32_t chain_tokens = 0;    // prompt tokens the chain covers
  uint32_t matched_chunks = 0;  // chain[0..matched_chunks) are stored
  uint64_t matched_tokens = 0;  // tokens they cover
  double lookup_ms = 0;         // ChainKeys + LOOKUP round trip
};

// The outcome of one prompt.
struct EvalResult {
  uint32_t prompt_tokens = 0;
  uint32_t restored_tokens = 0;   // imported from the store (0 on a miss or fallback)
  uint32_t evaluated_tokens = 0;  // evaluated by the engine
  uint32_t restored_chunks = 0;
  uint32_t queued_chunks = 0;      // chunks handed to the PUT thread
  double lookup_ms = 0;            // chain keys + LOOKUP
  double restore_ms = 0;           // GET + verify/decode + import (hit path)
  double get_ms = 0;               //   of which: GET round trips
  double decode_ms = 0;            //   of which: codec decode and verification
  double predictor_ms = 0;         //     of which: spec predictor over the matched tokens
  double import_ms = 0;            //   of which: Engine::ImportKv[AndState] (with the chunk cut)
  double prefill_ms = 0;           // Engine::Prefill of the evaluated tokens
  double export_ms = 0;            // Engine::ExportKv + chunk cut
  uint64_t get_payload_bytes = 0;  // payload bytes received
  // Ok, or why a hit was not used and the prompt was recomputed from scratch.
  Status fallback;
  // LOOKUP hits: the cost model's estimate for the tokens a restore would import, and
  // whether EvaluatePrompt declined the hit (then the prompt ran as a miss).
  RestoreEstimate estimate;
  bool declined = false;
  // Logits of the last prompt token (vocabulary floats).
  std::vector<float> logits;
};

// Counters over the session's life.
struct SessionStats {
  uint64_t prompts = 0, hits = 0, fallbacks = 0;
  // LOOKUP hits EvaluatePrompt declined (restore estimated slower than the prefill), and
  // the stored tokens they left unused.
  uint64_t declined_hits = 0, declined_tokens = 0;
  // Of the fallbacks: restores refused because a payload was damaged (Corruption: a
  // stored chunk that failed its checksum, or a payload bound to another key), and
  // because one was of another codec, artifact, model or format version (Mismatch).
  uint64_t fallbacks_corruption = 0, fallbacks_mismatch = 0;
  uint64_t puts_ok = 0, puts_failed = 0;
  uint64_t put_payload_bytes = 0;  // payload bytes sent
  uint64_t put_raw_bytes = 0;      // canonical bytes of the chunks (and states) encoded
  // Of the PUTs: recurrent-state records (codecs that store states), their canonical
  // bytes and their record bytes (inside put_raw_bytes and put_payload_bytes).
  uint64_t states_put = 0, put_state_raw_bytes = 0, put_state_stored_bytes = 0;
  double encode_ms = 0;  // PUT thread: EncodeKvChunks (spec: with its predictor)
  double put_ms = 0;     // PUT thread: the PUT round trips
};

class EngineSession {
 public:
  // The codec's layout() must be the engine's kv_layout(), and the codec must store
  // states exactly when the engine has one, else InvalidArgument.
  // Errors: InvalidArgument for a null engine, client or codec, max_queued_puts 0, or
  // restore_cost options ValidateRestoreCostOptions refuses.
  static Result<std::unique_ptr<EngineSession>> Create(std::unique_ptr<Engine> engine,
                                                       std::shared_ptr<Client> client,
                                                       std::shared_ptr<const ChunkCodec> codec,
                                                       SessionOptions options = {});
  ~EngineSession();
  EngineSession(const EngineSession&) = delete;
  EngineSession& operator=(const EngineSession&) = delete;

  // The whole step: Lookup, then RestoreHit when something matched and the cost model
  // takes it, else PrefillMiss. chain_tokens: the reusable prefix the chain covers (see
  // READ ME FIRST); 0 = the whole prompt. Errors: InvalidArgument for an empty prompt,
  // one longer than the engine holds, or chain_tokens > tokens.size(); engine prefill
  // failures; a failed LOOKUP is a miss (fallback set).
  Result<EvalResult> EvaluatePrompt(std::span<const uint32_t> tokens, uint32_t chain_tokens = 0);

  // The steps, for callers that time or report them separately (the demo).
  // LOOKUP of the chain of tokens [0, chain_tokens) (0 = all). Errors: InvalidArgument
  // for an empty prompt or chain_tokens > tokens.size(); the client's errors.
  Result<ChainLookup> Lookup(std::span<const uint32_t> tokens, uint32_t chain_tokens = 0);
  // Clears the sequence, evaluates the whole prompt and queues the PUT of the chain
  // chunks not stored. `lookup` is Lookup's answer for these tokens.
  // Errors: those of EvaluatePrompt; InvalidArgument for a lookup of another prompt.
  Result<EvalResult> PrefillMiss(std::span<const uint32_t> tokens, const ChainLookup& lookup);
  // Restores lookup.matched_chunks chunks (all but the last prompt token at most),
  // evaluates the rest and queues the PUT of the chunks not stored. Falls back to
  // PrefillMiss on any load-path failure (see READ ME FIRST).
  Result<EvalResult> RestoreHit(std::span<const uint32_t> tokens, const ChainLookup& lookup);

  // The cost model's estimate for restoring `lookup`'s matched tokens of a prompt of
  // `prompt_tokens` tokens (at most prompt_tokens - 1: the last one is evaluated).
  RestoreEstimate EstimateRestore(const ChainLookup& lookup, size_t prompt_tokens) const;
  RestoreCostModel& cost_model() const { return *cost_; }

  // Waits until every queued PUT has finished. Returns the first PUT error since the
  // previous Flush (Ok when none).
  Status Flush();

  // The engine, for generation after a prompt (its sequence holds the prompt).
  Engine& engine() const { return *engine_; }
  const ChunkCodec& codec() const { return *codec_; }
  SessionStats stats() const;

 private:
  struct PutJob {
    std::vector<uint32_t> tokens;
    std::vector<ChunkKey> keys;
    std::vector<KvChunk> chunks;         // chain chunks [first_chunk, keys.size())
    std::vector<RecurrentState> states;  // their states (StateAfterChunk), else empty
    uint32_t first_chunk = 0;
  };

  EngineSession(std::unique_ptr<Engine> engine, std::shared_ptr<Client> client,
                std::shared_ptr<const ChunkCodec> codec, SessionOptions options);
  Status CheckPrompt(std::span<const uint32_t> tokens) const;
  // The load path: GET, decode, import `restore_tokens` tokens. No side effect on
  // failure beyond a cleared sequence.
  Status Restore(std::span<const uint32_t> tokens, const ChainLookup& lookup, uint32_t restore_tokens,
                 EvalResult* out);
  // The GETs of the load path: the matched chunks' payloads (pipelined) and, for a codec
  // that stores states, the last one's state record. Errors: the first failed GET's.
  Status Fetch(const ChainLookup& lookup, std::vector<std::vector<uint8_t>>* payloads,
               std::vector<uint8_t>* record, EvalResult* out);
  // Asks the engine to keep its state at the ends of the chain chunks [matched, end)
  // that carry a state record (nothing for a codec without states).
  void KeepStates(const ChainLookup& lookup);
  // Exports the sequence (holding the whole prompt) and queues chunks [first, end).
  Status QueuePut(std::span<const uint32_t> tokens, const ChainLookup& chain, uint32_t first_chunk,
                  EvalResult* out) KVSTASH_EXCLUDES(mu_);
  // QueuePut, with a failure counted and kept for Flush (never an error of the call).
  void QueuePutCounted(std::span<const uint32_t> tokens, const ChainLookup& chain, EvalResult* out)
      KVSTASH_EXCLUDES(mu_);
  // The chain of tokens [0, chain_tokens) (0 = all), without a LOOKUP.
  Result<ChainLookup> ChainOf(std::span<const uint32_t> tokens, uint32_t chain_tokens) const;
  // InvalidArgument unless `lookup` is a chain of a prefix of these tokens.
  static Status CheckLookup(std::span<const uint32_t> tokens, const ChainLookup& lookup);
  void PutLoop() KVSTASH_EXCLUDES(mu_);

  std::unique_ptr<Engine> engine_;
  std::shared_ptr<Client> client_;
  std::shared_ptr<const ChunkCodec> codec_;
  SessionOptions options_;
  std::shared_ptr<RestoreCostModel> cost_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<PutJob> queue_ KVSTASH_GUARDED_BY(mu_);
  bool busy_ KVSTASH_GUARDED_BY(mu_) = false;  // the PUT thread holds a job
  bool stop_ KVSTASH_GUARDED_BY(mu_) = false;
  Status first_put_error_ KVSTASH_GUARDED_BY(mu_);
  SessionStats stats_ KVSTASH_GUARDED_BY(mu_);
  std::thread put_thread_;
};

}  // namespace kvstash::session
