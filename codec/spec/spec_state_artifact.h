// SpecStateArtifact: what both sides of spec state coding share besides the predictor
// (codec/spec/spec_state_codec.h): a calibrated spread offset per state tensor name and
// the 66 frequency tables of the residual tokens (codec/spec/spec_state_symbols.h).
// Built by CalibrateSpecState from (exact, predicted) state pairs of calibration text;
// its XXH3-64 digest goes into every coded state, so a decoder with another artifact
// returns Mismatch.
//
// Serialised layout (little-endian, docs/format/spec.md "State coding artifact"):
//   magic "KVSS", u16 version (1), u16 reserved (0),
//   i32 default_offset4, u32 n_offsets, n_offsets x (u16 name length, name bytes,
//   i32 offset4) in strictly increasing name order, u32 table_bytes, TableSet bytes
//   (codec/entropy/table_set.h: 66 tables, 8-bit symbols), u64 XXH3-64 of everything
//   before it.
//
// Thread-safety: immutable after Create/Parse; share freely.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/entropy/table_set.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::spec {

class SpecStateArtifact {
 public:
  // REQUIRES nothing; Errors: InvalidArgument unless `tables` has kStateTables tables of
  // 8-bit symbols, or a name is empty or longer than 255 bytes.
  static Result<SpecStateArtifact> Create(std::map<std::string, int32_t> offsets4,
                                          int32_t default_offset4,
                                          std::shared_ptr<const entropy::TableSet> tables);
  // Errors: Corruption for bad magic, truncation, trailing bytes, a checksum mismatch or
  // inconsistent fields; Mismatch for another version.
  static Result<SpecStateArtifact> Parse(std::span<const uint8_t> bytes);
  std::vector<uint8_t> Serialize() const;

  // Spread offset (quarter octaves) of tensor `name`; the default for unknown names.
  int32_t Offset4(const std::string& name) const;
  const std::map<std::string, int32_t>& offsets4() const { return offsets4_; }
  int32_t default_offset4() const { return default_offset4_; }
  const entropy::TableSet& tables() const { return *tables_; }
  // XXH3-64 of Serialize().
  uint64_t digest() const { return digest_; }

 private:
  SpecStateArtifact() = default;
  std::map<std::string, int32_t> offsets4_;
  int32_t default_offset4_ = 0;
  std::shared_ptr<const entropy::TableSet> tables_;
  uint64_t digest_ = 0;
};

// One calibration sample: the exact state and the predictor's state at the same
// boundary (same tensor names, dtypes f32 and shapes).
struct StateCalibrationPair {
  const RecurrentState* exact = nullptr;
  const RecurrentState* predicted = nullptr;
};

struct StateCalibrationOptions {
  // rANS probability precision P of the tables (10..15). Default: 12.
  int precision = 12;
};

// Calibration in two passes over the pairs:
//  1. offset4(name) = round(mean over the tensor's scalars with a normal, finite
//     prediction of [4 log2(|r| + 1) - (scale4 - 4 E(pred) + 92)]) (scale4 and the
//     context rule: codec/spec/spec_state_symbols.h). The default offset is
//     the mean of the per-name offsets (0 with no data).
//  2. Token histograms per table; table t = BuildTable(counts_t + 1/64 each) (the
//     pseudo-count keeps every symbol codable cheaply enough and empty tables valid).
// Errors: InvalidArgument for an empty pair list, null pointers, mismatched names,
// dtypes (only f32) or shapes; BuildTable's.
Result<SpecStateArtifact> CalibrateSpecState(std::span<const StateCalibrationPair> pairs,
                                             const StateCalibrationOptions& options = {});

// InvalidArgument unless `a` and `b` have the same tensors in the same order (names,
// shapes), all f32 with consistent data sizes.
Status CheckSameStateShape(const RecurrentState& a, const RecurrentState& b);

}  // namespace kvstash::spec
