// Test helper: writes safetensors files (codec/dckv/safetensors.h) from named fp32
// tensors, tensors laid out in name order without gaps, as the safetensors library
// writes them (header padded with spaces to a multiple of 8 bytes).
#pragma once

#include <bit>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/byte_io.h"

namespace kvstash::dckv::testing {

struct TestTensor {
  std::vector<uint64_t> shape;
  std::vector<float> values;
};

// The header JSON text of `tensors` (offsets in name order) and `metadata`.
inline std::string SafetensorsHeader(const std::map<std::string, TestTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    h[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + 4 * t.values.size()}}};
    at += 4 * t.values.size();
  }
  std::string text = h.dump();
  while (text.size() % 8 != 0) text += ' ';
  return text;
}

// A file with header text `header` (used as is) and the tensors' values in name order.
inline std::vector<uint8_t> SafetensorsBytes(const std::string& header,
                                             const std::map<std::string, TestTensor>& tensors) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.U64(header.size());
  out.insert(out.end(), header.begin(), header.end());
  for (const auto& [name, t] : tensors) {
    for (float v : t.values) w.U32(std::bit_cast<uint32_t>(v));
  }
  return out;
}

inline std::vector<uint8_t> SafetensorsBytes(const std::map<std::string, TestTensor>& tensors,
                                             const std::map<std::string, std::string>& metadata = {}) {
  return SafetensorsBytes(SafetensorsHeader(tensors, metadata), tensors);
}

}  // namespace kvstash::dckv::testing
