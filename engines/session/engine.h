// kvstash::session::Engine: what an engine session (engine_session.h) needs from an
// inference engine that holds one sequence's KV cache: prefill tokens, export the KV
// it holds, import KV in its place. llama.cpp (engines/llama_cpp/llama_kv_engine.h)
// and the reference runtime (engines/reference/reference_engine.h) implement it.
//
// READ ME FIRST
// - One sequence, positions 0..n-1 in order: Prefill appends at the end, ImportKv
//   replaces the whole sequence, ExportKv reads all of it.
// - KV crosses the interface in the canonical layout of kvstash/kv_chunk.h (per layer K
//   [T, n_kv_heads, head_dim] then V, K after RoPE) in kv_layout().dtype: the form a
//   PrefixCodec encodes and decodes.
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
};

}  // namespace kvstash::session
