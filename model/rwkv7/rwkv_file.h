// rwkv.cpp's legacy ggml model file ("ggmf", versions 100 and 101): parser and writer.
//
// Layout (docs/models/rwkv7.md; rwkv.cpp docs/FILE_FORMAT.md). All fields are
// little-endian u32 (rwkv.cpp writes machine order; every machine it targets is LE):
//
//   magic = 0x67676d66 (the bytes "fmgg" on disk), version (100 or 101),
//   n_vocab, n_embd, n_layer, data_type            -- 24-byte header
//   then, until the end of the file, tensor records:
//     n_dims (1..kMaxDims), name_len (1..kMaxNameBytes), data_type,
//     dims[n_dims]        ggml order: dims[0] varies fastest (reversed vs PyTorch)
//     name                name_len bytes, e.g. "blocks.3.att.key.weight"
//     data                product(dims) elements of data_type, no padding
//
// READ ME FIRST
// - dims are reversed relative to PyTorch: a PyTorch Linear weight of shape [out, in]
//   is stored with dims {in, out}, element (o, i) at index o * in + i.
// - Only fp32 (type 0) and fp16 (type 1) tensors are read; the quantised types of
//   rwkv.cpp (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) give NotSupported, any other type id
//   Corruption. The header's data_type is informational (rwkv.cpp's "most tensors").
// - The parser never trusts a count: every size is checked against the bytes that
//   remain before it is used, so a malformed file is Corruption, never UB. Tensor
//   data is kept as the raw stored bytes, so Serialize(Parse(b)) == b for every file
//   that parses (fuzz/rwkv_file_fuzz.cc checks this).
//
// Thread-safety: pure functions; RwkvFile is a plain value.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_bytes.h"  // ReadFileBytes, for callers reading model files
#include "kvstash/result.h"

namespace kvstash::rwkv7 {

inline constexpr uint32_t kRwkvFileMagic = 0x67676d66;  // "ggmf" as a LE u32
inline constexpr uint32_t kRwkvFileHeaderBytes = 24;

// Tensor element types of the format. Values are the stored ids; never renumber.
enum class RwkvDataType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 7,
  kQ5_1 = 8,
  kQ8_0 = 9,
};

// "F32", "F16", "Q4_0", ...; "unknown" for an id the format does not define.
std::string_view RwkvDataTypeName(uint32_t id);

struct RwkvFileHeader {
  uint32_t version = 101;  // 100 or 101 (they differ only for quantised tensors)
  uint32_t n_vocab = 0;
  uint32_t n_embd = 0;
  uint32_t n_layer = 0;
  uint32_t data_type = 0;  // an RwkvDataType id

  // Bounds accepted by the parser: far above any real RWKV model.
  static constexpr uint32_t kMaxVocab = 1u << 24;
  static constexpr uint32_t kMaxEmbd = 1u << 16;
  static constexpr uint32_t kMaxLayers = 4096;
  bool operator==(const RwkvFileHeader&) const = default;
};

// One named tensor as stored.
struct RwkvFileTensor {
  static constexpr size_t kMaxDims = 4;
  static constexpr size_t kMaxNameBytes = 1024;

  std::string name;
  uint32_t data_type = 0;      // kF32 or kF16 in a parsed file
  std::vector<uint64_t> dims;  // ggml order, each >= 1
  std::vector<uint8_t> data;   // product(dims) * element size bytes, little-endian

  uint64_t NumElements() const;
  // The values widened to fp32 (fp16 converts exactly).
  // Errors: NotSupported for a type other than F32/F16; Corruption if the data size
  // disagrees with dims.
  Result<std::vector<float>> ToF32() const;
  bool operator==(const RwkvFileTensor&) const = default;
};

struct RwkvFile {
  RwkvFileHeader header;
  std::vector<RwkvFileTensor> tensors;  // file order; names unique

  // The tensor with this name, or nullptr.
  const RwkvFileTensor* Find(std::string_view name) const;
  bool operator==(const RwkvFile&) const = default;
};

// Parses a whole file image.
// Errors: Corruption for a bad magic, a truncated header or record, a count out of
// bounds, a zero dimension, data running past the end, an unknown type id or a
// duplicate name; NotSupported for a version other than 100/101 or a quantised tensor.
Result<RwkvFile> ParseRwkvFile(std::span<const uint8_t> bytes);

// Writes the file image (the inverse of ParseRwkvFile).
// Errors: InvalidArgument if a tensor is not F32/F16, has 0 or > kMaxDims dims, a
// zero dim, a name of 0 or > kMaxNameBytes bytes, or a data size that disagrees.
Result<std::vector<uint8_t>> SerializeRwkvFile(const RwkvFile& file);

}  // namespace kvstash::rwkv7
