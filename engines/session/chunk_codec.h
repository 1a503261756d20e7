// kvstash::session::ChunkCodec: what an engine session (engine_session.h) needs from a
// codec: the keys of a prompt's chain, and the payloads (plus, for engines with a
// recurrent state, the state records) of its chunks, both ways. PrefixChunkCodec
// (prefix_chunk_codec.h) is the one over kvstash's PrefixCodec (raw, spec, dckv of an
// attention model's KV); the hybrid demo's codecs (demo/demo_hybrid_codec.h) store
// KV + recurrent-state records.
//
// READ ME FIRST
// - Chunks cross the interface in the canonical layout of kvstash/kv_chunk.h, layout().
// - A codec that stores states (stores_state()) puts a state record beside the chunks
//   StateAfterChunk names; the session LOOKs UP with require_state (the longest stored
//   prefix ending at a chunk that carries one) and GETs the last matched chunk's record.
// Thread-safety: a session calls Encode on its PUT thread and the other methods on its
// caller's thread, possibly at the same time: those must not race with Encode (one
// that caches encoder state, like the hybrid spec coder, keeps it to Encode).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash::session {

// What Encode did (bytes of the chunks and state records it coded).
struct ChunkEncodeStats {
  uint64_t raw_bytes = 0;                                // canonical bytes of the chunks and states encoded
  uint64_t stored_bytes = 0;                             // payload and state-record bytes
  uint64_t state_raw_bytes = 0, state_stored_bytes = 0;  // of which: the state records'
  uint32_t states = 0;                                   // state records coded
};

// Where the time of Restore went.
struct ChunkRestoreStats {
  double predictor_ms = 0;  // spec: the predictor over the matched tokens
};

class ChunkCodec {
 public:
  virtual ~ChunkCodec() = default;

  // The codec's name in reports ("raw", "spec", "dckv").
  virtual std::string name() const = 0;
  // Lossy KV (dckv): a restore is not byte-exact.
  virtual bool lossy() const = 0;
  // Layout and dtype of the chunks it encodes and restores.
  virtual const KvLayout& layout() const = 0;
  // Keys of the chain of `tokens` (full chunks, then a partial one for a remainder).
  // Errors: InvalidArgument for an empty prefix.
  virtual Result<std::vector<ChunkKey>> ChainKeys(std::span<const uint32_t> tokens) const = 0;
  // Tokens covered by the first `chunks` chunks of the chain of a `prefix_tokens` prefix.
  virtual uint64_t TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const = 0;

  // Whether the codec stores recurrent-state records. Default: false.
  virtual bool stores_state() const { return false; }
  // Whether chain chunk `chunk` (0-based) of a chain of `chunks` carries a state record.
  // Default: never.
  virtual bool StateAfterChunk(uint32_t chunk, uint32_t chunks) const {
    (void)chunk;
    (void)chunks;
    return false;
  }

  // The PUTs of chain chunks [first_chunk, keys.size()) of `tokens` (the prefix the
  // chain covers; `keys` its ChainKeys): chunks[j] is chain chunk first_chunk + j,
  // states[j] its state record's state when StateAfterChunk names it (ignored
  // otherwise; may be empty for a codec without states). Chunk i > 0 names chunk i-1 as
  // its parent; every chunk routes by chunk 0's key; every payload is bound to its key.
  // Errors: InvalidArgument for keys, chunks or states that do not fit; codec errors.
  virtual Result<std::vector<PutChunk>> Encode(std::span<const uint32_t> tokens,
                                               std::span<const ChunkKey> keys,
                                               std::span<const KvChunk> chunks,
                                               std::span<const RecurrentState> states, uint32_t first_chunk,
                                               ChunkEncodeStats* stats) const = 0;

  // Decodes and verifies the payloads of chain chunks [0, payloads.size()) of `tokens`
  // and returns their chunks in chain order (keys[i].tokens tokens each). A codec that
  // stores states decodes `state_record` (the last chunk's) into *state; one that does
  // not ignores both. Errors: Mismatch for a payload or record of another codec,
  // artifact, model, layout or position; Corruption for a damaged one or one bound to
  // another key; InvalidArgument for keys that are not a chain of `tokens`.
  virtual Result<std::vector<KvChunk>> Restore(std::span<const uint32_t> tokens,
                                               std::span<const ChunkKey> keys,
                                               std::span<const std::vector<uint8_t>> payloads,
                                               std::span<const uint8_t> state_record, RecurrentState* state,
                                               ChunkRestoreStats* stats) const = 0;
};

}  // namespace kvstash::session
