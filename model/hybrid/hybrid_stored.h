// A hybrid model's state at a boundary in the form kvstash stores it, and back:
// codec-raw chunk payloads of the attention KV (kvstash/payload_format.h, the KV layout
// of hybrid_state.h) plus one recurrent-state record (EncodeStateRecord), both tagged
// with the model fingerprint. This is what an engine PUTs for a hybrid prefix and what
// it restores from a GET; a record or payload that fails any check is an error, which
// the caller treats as a miss (never a partially restored state).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/result.h"
#include "model/hybrid/hybrid_model.h"

namespace kvstash::hybrid {

struct StoredBoundary {
  // Chunk payloads of tokens [0, c), [c, 2c), ... up to the boundary; the last one is
  // shorter (flag kPayloadFlagPartialChunk) when the boundary is not a multiple of c.
  std::vector<std::vector<uint8_t>> kv_payloads;
  // EncodeStateRecord of the linear layers' recurrent state at the boundary.
  std::vector<uint8_t> state_record;
};

// Serialises `state` (at boundary state.tokens) with `chunk_tokens` tokens per chunk.
// A boundary of 0 gives no payloads. Errors: InvalidArgument for chunk_tokens 0 or
// above kMaxChunkTokens, a state that does not fit the model, a model without
// attention layers.
Result<StoredBoundary> EncodeStoredBoundary(const HybridModel& model, const HybridState& state,
                                            uint32_t chunk_tokens);

// Parses and checks everything, then rebuilds the state: every payload parses
// (ParsePayload: header CRC, body checksum), is codec raw with the model's KV layout
// and fingerprint, and starts where the previous one ended; its body matches the
// header's content checksum; the state record decodes (XXH3-64 trailer), carries the
// model's fingerprint and sits at the boundary the chunks reach.
// Errors: Corruption for any malformed, truncated or checksum-failing byte; Mismatch
// for a payload or record of another model or layout, or a non-raw codec;
// InvalidArgument from ImportState (tensors of the wrong names or shapes).
Result<HybridState> RestoreStoredBoundary(const HybridModel& model,
                                          std::span<const std::vector<uint8_t>> kv_payloads,
                                          std::span<const uint8_t> state_record);

}  // namespace kvstash::hybrid
