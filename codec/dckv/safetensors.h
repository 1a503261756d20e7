// A strict reader of safetensors files (https://huggingface.co/docs/safetensors),
// float32 tensors only: the dckv trainer's interchange file (dckv_trained.h).
//
// Format: u64 little-endian header length N, N bytes of UTF-8 JSON (an object: each
// key a tensor name mapping to {"dtype", "shape", "data_offsets": [begin, end]}, plus
// an optional "__metadata__" object of string values), then the data buffer; offsets
// are relative to the buffer's start. This reader accepts only what the format allows
// and the importer needs:
//   - 8 <= file size, N <= kMaxSafetensorsHeader and N <= file size - 8;
//   - the header a JSON object without duplicate keys; every tensor entry an object
//     with exactly dtype, shape and data_offsets; dtype "F32"; shape an array of
//     non-negative integers (an empty array: a scalar, one value); data_offsets two
//     integers begin <= end with end - begin = 4 * (product of the shape), checked
//     without overflow;
//   - the tensors' byte ranges inside the buffer, not overlapping, and together
//     covering it exactly (the format allows no holes);
//   - every value finite (no NaN, no infinity);
//   - __metadata__, when present, an object of strings.
// Values are read as little-endian fp32 (any alignment).
//
// Errors: Corruption naming the file part or the tensor for any violation (truncated
// file, bad header length, invalid JSON, a bad entry, overlap or hole, a non-finite
// value), InvalidArgument for a dtype other than F32.
// Thread-safety: pure function; the result is a value type.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::dckv {

// Largest accepted JSON header (bytes): far above any real header, far below memory.
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

struct SafetensorsTensor {
  std::vector<uint64_t> shape;  // dims, outermost first; empty for a scalar
  std::vector<float> values;    // row-major, product of shape values
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;       // __metadata__ (empty when absent)
  std::map<std::string, SafetensorsTensor> tensors;  // by name
};

// Parses a whole file's bytes (see above).
Result<SafetensorsFile> ParseSafetensors(std::span<const uint8_t> bytes);

}  // namespace kvstash::dckv
