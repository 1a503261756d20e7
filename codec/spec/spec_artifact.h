// SpecArtifact: everything the spec codec's two sides must share besides the model:
// the context bucketing, the calibrated per-channel residual spreads, and the
// frequency tables. Produced by calibration (codec/spec/spec_calibration.h), stored as
// a versioned file whose digest goes into every payload header (a decoder with another
// artifact returns Mismatch).
//
// Serialised layout (little-endian, docs/format/spec.md "Artifact"):
//   magic "KVSA", u16 version (1), u8 dtype, u8 reserved,
//   u32 n_layers, u32 n_kv_heads, u32 head_dim,
//   f32 s_min, f32 step, u32 buckets, u32 frac_bins,
//   u64 predictor_digest, u32 variant length, variant bytes,
//   f32 log2_sigma [n_layers][2][n_kv_heads][head_dim],
//   u32 table_bytes, TableSet bytes (codec/entropy/table_set.h),
//   u64 XXH3-64 of everything before it.
// Thread-safety: immutable value after Parse/construction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/entropy/table_set.h"
#include "codec/spec/spec_context.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/prefix_key.h"

namespace kvstash::spec {

struct SpecArtifact {
  KvLayout layout;               // layout.dtype is the coded dtype (bf16 / fp8_e4m3)
  ContextConfig contexts;        // contexts.dtype == layout.dtype
  uint64_t predictor_digest = 0; // SpecPredictor::Digest() of the calibrating predictor
  std::string predictor_variant; // e.g. "w8a16-g128"
  std::vector<float> log2_sigma; // [n_layers][2][n_kv_heads][head_dim]
  std::shared_ptr<const entropy::TableSet> tables;  // contexts.num_tables() tables

  // log2_sigma of one (layer, K/V=0/1): [n_kv_heads * head_dim].
  std::span<const float> Log2Sigma(uint32_t layer, uint32_t kv) const;

  std::vector<uint8_t> Serialize() const;
  // Errors: Corruption for bad magic, truncation, checksum mismatch, inconsistent sizes;
  // Mismatch for another version.
  static Result<SpecArtifact> Parse(std::span<const uint8_t> bytes);
  // SHA-256 of Serialize(): the artifact digest of payload headers and namespaces.
  Digest256 Digest() const;
};

}  // namespace kvstash::spec
