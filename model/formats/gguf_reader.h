// GgufFile: a parsed GGUF (v2/v3) model file: metadata key/values, tensor directory,
// and bounds-checked access to each tensor's bytes in a read-only memory map.
//
// Format (ggml docs/gguf.md; little-endian):
//   u32 magic "GGUF", u32 version (2 or 3), u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims (1..4), u64 dims[n_dims] (ne0 first,
//                    the fastest-varying), u32 ggml_type, u64 offset },
//   padding to `general.alignment` (u32, default 32), tensor data.
//   string = u64 length + bytes (no terminator); value types: 0 u8, 1 i8, 2 u16,
//   3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 elem type, u64 n,
//   values; nested arrays rejected), 10 u64, 11 i64, 12 f64.
//
// Every count, length, dimension and offset is checked against the file size before
// use; any violation is Corruption with the reason (the file is never trusted).
// Tensor types outside model/formats/ggml_types.h are NotSupported when a tensor is read.
//
// Thread-safety: immutable after Open; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "kvstash/result.h"
#include "model/formats/ggml_types.h"

namespace kvstash::model {

enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// One metadata value. Integers (and bool) are held in `i` (u64 values above INT64_MAX
// are rejected as Corruption), floats in `f`, strings in `s`. Arrays hold their
// elements in `strings` (string arrays), `ints` or `floats` by element type.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType elem_type = GgufValueType::kU8;  // arrays only
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

// A tensor directory entry.
struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ne0 (contiguous) first
  uint32_t raw_type = 0;       // ggml type id as stored
  uint64_t offset = 0;         // from the start of the data section
  uint64_t elements = 0;       // product of dims
  uint64_t bytes = 0;          // 0 when raw_type is unsupported
};

class GgufFile {
 public:
  // Maps and parses `path`. IOError if it cannot be read; Corruption if it is not a
  // well-formed GGUF v2/v3 file (reason in the message).
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (the fuzzer and tests use this). The bytes must
  // outlive the returned object.
  static Result<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  bool Has(const std::string& key) const { return kv_.count(key) != 0; }
  // Typed metadata access. NotFound if absent; InvalidArgument if the stored type
  // does not fit (e.g. a negative or too-large integer for GetU32).
  Result<uint32_t> GetU32(const std::string& key) const;
  Result<float> GetF32(const std::string& key) const;
  Result<bool> GetBool(const std::string& key) const;
  Result<std::string> GetString(const std::string& key) const;
  Result<const GgufValue*> GetArray(const std::string& key) const;

  // The tensor's directory entry, or NotFound.
  Result<const GgufTensorInfo*> FindTensor(const std::string& name) const;
  // The tensor's stored bytes. NotFound, or NotSupported for an unknown type.
  Result<std::span<const uint8_t>> TensorBytes(const GgufTensorInfo& t) const;
  // Dequantised fp32 copy of the tensor, row-major with dims reversed (ne0 last).
  Result<std::vector<float>> ReadF32(const std::string& name) const;

 private:
  GgufFile() = default;
  Status ParseAll();

  std::unique_ptr<MappedFile> file_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_start_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace kvstash::model
