// SafetensorsFile: a parsed Hugging Face .safetensors file (one shard).
//
// Format (huggingface/safetensors): u64 little-endian header length N, N bytes of
// JSON {name: {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets":
// [begin, end]}, "__metadata__": {...}}, then the data buffer; offsets are relative
// to the buffer. Tensors are row-major, little-endian.
//
// Every offset and shape is checked against the file (Corruption on violation);
// dtypes other than F32/F16/BF16 are NotSupported when read.
// Thread-safety: immutable after Open.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "kvstash/result.h"

namespace kvstash::model {

struct SafetensorInfo {
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
};

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
  bool Has(const std::string& name) const { return tensors_.count(name) != 0; }
  // fp32 copy of the tensor; InvalidArgument unless its shape equals `shape`.
  Result<std::vector<float>> ReadF32(const std::string& name, const std::vector<uint64_t>& shape) const;

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  std::span<const uint8_t> data_;
  std::map<std::string, SafetensorInfo> tensors_;
};

}  // namespace kvstash::model
