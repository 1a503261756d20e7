// kvstash::session::Engine: what an engine session (engine_session.h) needs from an
// inference engine that holds one sequence's KV cache: prefill tokens, export the KV
// it holds, import KV in its place, and (optionally) the exact recurrent state at a
// chunk boundary. llama.cpp (engines/llama_cpp/llama_kv_engine.h), the reference
// runtime (engines/reference/reference_engine.h) and the hybrid runtime
// (engines/hybrid/hybrid_engine.h, KV + recurrent state) implement it.
//
// READ ME FIRST
// - One sequence, positions 0..n-1 in order: Prefill appends at the end, ImportKv
//   replaces the whole sequence, ExportKv reads all of it.
// - KV crosses the interface in the canonical layout of kvstash/kv_chunk.h (per layer K
//   [T, n_kv_heads, head_dim] then V, K after RoPE) in kv_layout().dtype: the form a
//   PrefixCodec encodes and decodes.
// - Recurrent state (a hybrid model's linear layers, kvstash/kv_chunk.h RecurrentState):
//   an engine whose sequence is more than its KV says so (has_state()); it keeps the
//   exact state at the boundaries it is asked for (KeepStatesAt) while it prefills, and
//   imports KV only together with the state at the KV's end (ImportKvAndState). Engines
//   without one keep the defaults: no state, nothing kept, NotSupported.
// Thread-safety: an engine is driven by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::session {

class Engine {
 public:
  virtual ~Engine() = default;

  // Layout and dtype of the KV the engine exports and imports.
  virtual const KvLayout& kv_layout() const = 0;
  // The most tokens the sequence holds (prompt and generated).
  virtual uint32_t max_tokens() const = 0;
  // Empties the sequence.
  virtual void Clear() = 0;
  // Evaluates `tokens` at positions pos, pos+1, ... and returns the logits of the last
  // one (vocabulary floats). REQUIRES: the sequence holds exactly positions [0, pos).
  // Errors: InvalidArgument for no tokens; the engine's evaluation errors.
  virtual Result<std::vector<float>> Prefill(std::span<const uint32_t> tokens, uint32_t pos) = 0;
  // Replaces the sequence by `chunks` (kv_layout(), in position order, `tokens` tokens
  // in all) as positions [0, tokens). On failure the sequence is empty (never a partial
  // import). Errors: the engine's (Corruption for KV it refuses).
  virtual Status ImportKv(std::span<const KvChunk> chunks, uint32_t tokens) = 0;
  // The KV of the whole sequence (kv_layout()). Errors: the engine's.
  virtual Result<KvChunk> ExportKv() = 0;

  // Whether the sequence holds a recurrent state besides its KV. Default: false.
  virtual bool has_state() const { return false; }
  // The following Prefill calls keep the exact recurrent state at each of `boundaries`
  // (token counts, ascending) they reach; replaces the previous list and drops the
  // states kept for it. Default: nothing (no state).
  virtual void KeepStatesAt(std::span<const uint32_t> boundaries) { (void)boundaries; }
  // The recurrent state kept at `boundary`. Errors: NotFound when none was kept there;
  // NotSupported for an engine without state (the default).
  virtual Result<RecurrentState> ExportState(uint32_t boundary) {
    (void)boundary;
    return Status::NotSupported("the engine holds no recurrent state");
  }
  // Replaces the sequence by `chunks` (positions [0, state.boundary_tokens)) and the
  // recurrent state at their end. On failure the sequence is empty. Errors: the
  // engine's (Corruption or InvalidArgument for KV or state it refuses); NotSupported
  // for an engine without state (the default).
  virtual Status ImportKvAndState(std::span<const KvChunk> chunks, const RecurrentState& state) {
    (void)chunks;
    (void)state;
    return Status::NotSupported("the engine holds no recurrent state");
  }
};

}  // namespace kvstash::session
