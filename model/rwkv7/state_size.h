// Model-free size measures of fp32 recurrent-state bytes: the yardsticks a
// predictor-based state coder is measured against (`kvstash-bench state`).
//
// - zstd: libzstd's one-shot compressor at a given level (19 by default in the bench)
//   on the bytes as stored; the result is decompressed and compared, so a size is only
//   reported for a verified round trip.
// - zstd after byte-plane shuffle: the same on the bytes regrouped plane by plane
//   (all byte 0s, then all byte 1s, ...; blosc's "shuffle").
// - byte-plane entropy: the ideal size of an order-0 byte-plane coder (e.g. rANS with
//   one frequency table per plane), sum over the 4 planes p of n * H_p / 8 bytes, where
//   H_p = -sum_s (c_s / n) log2(c_s / n) over the byte values s of plane p (plane 0 =
//   least significant byte of the little-endian fp32, plane 3 = sign and exponent).
//   It excludes the frequency tables, so a real coder is slightly larger.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::rwkv7 {

// Order-0 entropy, in bits per symbol, of each of the 4 byte planes of `fp32_bytes`.
// Errors: InvalidArgument if the size is not a multiple of 4. Zero bytes give zeros.
Result<std::array<double, 4>> BytePlaneEntropyBits(std::span<const uint8_t> fp32_bytes);

// Ideal byte-plane coder size in bytes: sum_p n * H_p / 8 (n = size / 4).
// Errors: as BytePlaneEntropyBits.
Result<double> BytePlaneEntropyBytes(std::span<const uint8_t> fp32_bytes);

// Regroups fp32 bytes plane by plane: out[p * n + i] = in[4 * i + p].
// Errors: InvalidArgument if the size is not a multiple of 4.
Result<std::vector<uint8_t>> ShuffleBytePlanes(std::span<const uint8_t> fp32_bytes);

// Compressed size of `bytes` with zstd at `level` (1..ZSTD_maxCLevel()), after checking
// that decompression gives the input back.
// Errors: InvalidArgument for a level out of range; Internal if zstd fails or the
// round trip differs.
Result<uint64_t> ZstdCompressedBytes(std::span<const uint8_t> bytes, int level);

// The measures above for one part of a recurrent state.
struct StatePartSize {
  std::string part;              // tensor-name suffix ("wkv_state") or "all"
  uint64_t tensors = 0;          // tensors in the part
  uint64_t scalars = 0;          // fp32 values
  uint64_t raw_bytes = 0;        // 4 * scalars
  uint64_t zstd_bytes = 0;       // zstd of the part's bytes (tensors concatenated in order)
  uint64_t zstd_shuffled_bytes = 0;  // zstd after ShuffleBytePlanes
  double byteplane_bytes = 0.0;  // BytePlaneEntropyBytes of the part's bytes
};

// Splits a state into parts by tensor-name suffix (the text after the last '.', so
// "layers.3.wkv_state" -> "wkv_state"; parts in order of first appearance), measures
// each, and appends an "all" row: raw and zstd over all tensors concatenated in state
// order, byteplane_bytes = the sum over the parts (one set of plane tables per part,
// as a byte-plane coder that knows the tensor kinds would keep).
// Errors: InvalidArgument for a tensor that is not f32 or fails Validate(); zstd's.
Result<std::vector<StatePartSize>> MeasureStateParts(const RecurrentState& state, int zstd_level);

}  // namespace kvstash::rwkv7
