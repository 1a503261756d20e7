// spec coding on a hybrid model (docs/format/spec.md §7.6): the exact fp32 attention
// KV and the exact recurrent state are both coded losslessly against what the
// deterministic int8 predictor (model/hybrid/hybrid_predictor.h) computes over the
// same tokens, with the f32 residual coder of spec state coding
// (codec/spec/spec_state_codec.h; one SpecStateArtifact holds the offsets of the KV
// tensor names and of the state tensor names).
//
// Why not codec/spec's KV coder (spec_codec.h): its contexts and tables are defined for
// bf16 and fp8 KV only; the hybrid stores fp32 KV (continuations must be bit-identical
// to the uninterrupted run), and the f32 state coder codes any f32 tensor exactly.
//
// Stored forms:
// - KV chunk: a payload (docs/format/payload.md) with codec id 1 (spec), the f32 KV
//   layout of hybrid_state.h, the model fingerprint, token_offset and the exact
//   chunk's content checksum; its body is a state body (spec.md §7.4) of the tensors
//   "kv.<a>.k", "kv.<a>.v" (a = index among attention layers, shape [tokens,
//   n_kv_heads, head_dim], f32), boundary_tokens = the chunk's end. (spec's bf16/fp8
//   KV body is never used with an f32 layout, so the two cannot be confused.)
// - State: a raw state record (EncodeStateRecord) holding one u8 tensor
//   "spec.state_body" [n] whose bytes are the state body of the recurrent state
//   against the predictor's; boundary_tokens is the boundary. A plain raw record (the
//   exact tensors) is also accepted on decode.
// Every decode checks the artifact digest and prediction checksum (Mismatch) and the
// exact content checksum (Corruption): a damaged byte is an error, never a state.
//
// Thread-safety: pure functions over immutable inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/spec/spec_state_artifact.h"
#include "codec/spec/spec_state_codec.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_predictor.h"

namespace kvstash::hybrid {

inline constexpr const char* kSpecStateBodyTensor = "spec.state_body";

// The KV of tokens [begin, end) of `state` as named f32 tensors ("kv.<a>.k" / ".v",
// [end - begin, n_kv_heads, head_dim]) with boundary_tokens = end.
// Errors: ExportKvChunk's.
Result<RecurrentState> KvTensors(const HybridConfig& config, const HybridState& state, uint32_t begin,
                                 uint32_t end);
// The same from `chunk`, the KV of tokens [begin, begin + chunk.tokens) in
// HybridKvLayout. Errors: InvalidArgument for a chunk of another layout.
Result<RecurrentState> KvTensors(const HybridConfig& config, const KvChunk& chunk, uint32_t begin);

// Payload of the exact KV of [begin, end) coded against the predictor's state
// `predicted` (which must have consumed at least `end` tokens of the same prefix).
// Errors: InvalidArgument for bad ranges or shapes; EncodeSpecState's.
Result<std::vector<uint8_t>> EncodeHybridSpecChunk(const HybridModel& model, const spec::SpecStateArtifact& artifact,
                                                   const HybridState& exact, const HybridState& predicted,
                                                   uint32_t begin, uint32_t end, bool partial,
                                                   spec::StateCodingStats* stats = nullptr);
// The same from `exact`, the exact KV of tokens [begin, begin + exact.tokens) in
// HybridKvLayout (what an engine exports). Errors: as above, and InvalidArgument for a
// chunk of another layout.
Result<std::vector<uint8_t>> EncodeHybridSpecChunk(const HybridModel& model,
                                                   const spec::SpecStateArtifact& artifact,
                                                   const KvChunk& exact, const HybridState& predicted,
                                                   uint32_t begin, bool partial,
                                                   spec::StateCodingStats* stats = nullptr);

// State record of `exact` (the recurrent state at its boundary) coded against
// `predicted` (the predictor's at the same boundary).
Result<std::vector<uint8_t>> EncodeHybridSpecState(const HybridModel& model, const spec::SpecStateArtifact& artifact,
                                                   const RecurrentState& exact, const RecurrentState& predicted,
                                                   spec::StateCodingStats* stats = nullptr);

// Restores the state at the boundary the payloads reach: runs `predictor` over
// prefix[0, boundary) from the empty state, decodes every payload (codec spec, the
// model's layout and fingerprint, consecutive token offsets) and the state record
// (spec-coded or raw) against it, and imports. `prefix` must hold at least the
// boundary's tokens. *predictor_ms: wall time of the predictor run (may be null).
// Errors: Corruption for any damaged byte; Mismatch for another model, layout, codec,
// artifact or prediction; InvalidArgument for a prefix shorter than the payloads.
Result<HybridState> RestoreHybridSpecBoundary(const HybridModel& model, const HybridPredictor& predictor,
                                              const spec::SpecStateArtifact& artifact,
                                              std::span<const uint32_t> prefix,
                                              std::span<const std::vector<uint8_t>> kv_payloads,
                                              std::span<const uint8_t> state_record, double* predictor_ms = nullptr);

// Calibrates the shared artifact from (exact, predicted) pairs: the recurrent states
// at every `every` tokens of each token sequence and the KV of each `every`-token
// span. Errors: InvalidArgument for no sequences / every = 0; CalibrateSpecState's.
Result<spec::SpecStateArtifact> CalibrateHybridSpec(const HybridModel& model, const HybridPredictor& predictor,
                                                    std::span<const std::vector<uint32_t>> sequences,
                                                    uint32_t every);

}  // namespace kvstash::hybrid
