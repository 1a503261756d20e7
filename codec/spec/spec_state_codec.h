// Spec state coding: lossless coding of a hybrid model's exact recurrent state against
// the state the spec predictor reached at the same boundary (the predictor runs for
// the attention KV anyway, and its recurrent layers produce their own state).
//
// READ ME FIRST
// - The decoder must hold the same prediction bit for bit: the body carries
//   RecurrentState::ContentChecksum() of the prediction, and a decoder whose
//   prediction (or artifact) differs returns Mismatch, never a state.
// - Every fp32 bit pattern (NaN payloads, +-Inf, -0, subnormals) round-trips: the
//   residual is taken in the fp32 ordinal domain modulo 2^32 (spec_state_symbols.h).
// - Names, dtypes, shapes and boundary_tokens come from the prediction; the exact
//   state must match it tensor for tensor (all f32) and be at the same boundary.
// - The body ends the decode with a check of the exact state's ContentChecksum: a
//   corrupt body gives Corruption, never a wrong state.
// - Probabilities are integer tables chosen by integer contexts (docs/architecture.md §3): no
//   floating-point operation runs while coding.
//
// Body layout (little-endian; docs/format/spec.md "State coding", version 1):
//   magic "KSSC", u8 version (1), u8 flags (0), u16 reserved (0),
//   u64 artifact digest, u64 prediction checksum, u64 exact state checksum,
//   u64 scalars, u64 raw_bit_count, u32 rans_bytes,
//   rans stream (codec/entropy/rans.h: one token per scalar, tensors in order,
//   row-major), then ceil(raw_bit_count / 8) bytes of raw bits (LSB-first, each
//   scalar's raw bits least significant first, unused high bits of the last byte 0).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "codec/spec/spec_state_artifact.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::spec {

// Sizes of one encoded state, for reports.
struct StateCodingStats {
  uint64_t scalars = 0;
  uint64_t body_bytes = 0;      // everything, header included
  uint64_t header_bytes = 0;
  uint64_t rans_bytes = 0;
  uint64_t raw_bits = 0;
  // Ideal bits (token -log2 p + raw bits) and scalars per tensor-name suffix
  // ("wkv_state", ...): the split of the cost by tensor kind.
  std::map<std::string, std::pair<double, uint64_t>> ideal_bits_by_kind;
};

// Encodes `exact` against `predicted`.
// Errors: InvalidArgument if the states differ in tensors, shapes, dtypes (only f32) or
// boundary_tokens,
// or more than 2^32 - 1 scalars; rANS errors (Internal).
Result<std::vector<uint8_t>> EncodeSpecState(const SpecStateArtifact& artifact,
                                             const RecurrentState& exact,
                                             const RecurrentState& predicted,
                                             StateCodingStats* stats = nullptr);

// Decodes a body from EncodeSpecState with the decoder's own prediction.
// Errors: Mismatch for another artifact digest, another prediction checksum or an
// unknown version; Corruption for bad magic, truncated or trailing bytes, a bad rANS
// stream or raw-bit section, or a decoded state whose checksum differs;
// InvalidArgument for a prediction that is not all f32.
Result<RecurrentState> DecodeSpecState(const SpecStateArtifact& artifact,
                                       std::span<const uint8_t> body,
                                       const RecurrentState& predicted);

}  // namespace kvstash::spec
