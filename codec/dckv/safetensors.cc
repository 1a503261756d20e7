#include "codec/dckv/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/byte_io.h"

namespace kvstash::dckv {
namespace {

Status Bad(const std::string& what) { return Status::Corruption("safetensors: " + what); }

// A non-negative JSON integer that fits uint64.
bool AsCount(const nlohmann::json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

Result<SafetensorsFile> ParseSafetensors(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) return Bad("file shorter than its 8-byte header length");
  const uint64_t n = LoadLe<uint64_t>(bytes.data());
  if (n > kMaxSafetensorsHeader) return Bad("header length " + std::to_string(n) + " above the limit");
  if (n > bytes.size() - 8) return Bad("header length " + std::to_string(n) + " past the end of the file");
  if (n < 2) return Bad("header too short for a JSON object");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  // Duplicate top-level keys: nlohmann keeps the last one silently, so count them.
  bool duplicate = false;
  std::string duplicate_key;
  std::set<std::string> keys;
  const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t event,
                                                   nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!keys.insert(parsed.get<std::string>()).second && !duplicate) {
        duplicate = true;
        duplicate_key = parsed.get<std::string>();
      }
    }
    return true;
  };
  const nlohmann::json header =
      nlohmann::json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Bad("header is not valid JSON");
  if (!header.is_object()) return Bad("header is not a JSON object");
  if (duplicate) return Bad("duplicate header key '" + duplicate_key + "'");
  const std::span<const uint8_t> data = bytes.subspan(8 + n);
  SafetensorsFile out;
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Bad("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return Bad("__metadata__ value of '" + key + "' is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor '" + name + "': ";
    if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return Bad(t + "entry is not an object of exactly dtype, shape and data_offsets");
    }
    if (!entry["dtype"].is_string()) return Bad(t + "dtype is not a string");
    const std::string dtype = entry["dtype"].get<std::string>();
    if (dtype != "F32")
      return Status::InvalidArgument("safetensors: " + t + "dtype " + dtype + ", only F32 is read");
    const auto& shape = entry["shape"];
    if (!shape.is_array()) return Bad(t + "shape is not an array");
    SafetensorsTensor tensor;
    uint64_t count = 1;
    for (const auto& dim : shape) {
      uint64_t v = 0;
      if (!AsCount(dim, &v)) return Bad(t + "shape holds a value that is not a non-negative integer");
      if (v != 0 && count > (std::numeric_limits<uint64_t>::max() / 4) / v) return Bad(t + "shape too large");
      count *= v;
      tensor.shape.push_back(v);
    }
    const auto& off = entry["data_offsets"];
    uint64_t begin = 0, end = 0;
    if (!off.is_array() || off.size() != 2 || !AsCount(off[0], &begin) || !AsCount(off[1], &end) ||
        begin > end) {
      return Bad(t + "data_offsets is not [begin, end] with 0 <= begin <= end");
    }
    if (end > data.size()) return Bad(t + "data_offsets past the end of the file");
    if (end - begin != 4 * count)
      return Bad(t + "data_offsets span does not match the shape (4 bytes per value)");
    tensor.values.resize(count);
    for (uint64_t i = 0; i < count; ++i) {
      const float v = std::bit_cast<float>(LoadLe<uint32_t>(data.data() + begin + 4 * i));
      if (!std::isfinite(v)) return Bad(t + "non-finite value at index " + std::to_string(i));
      tensor.values[i] = v;
    }
    ranges.push_back({{begin, end}, name});
    out.tensors.emplace(name, std::move(tensor));
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [range, name] : ranges) {
    if (range.first < covered) return Bad("tensor '" + name + "' overlaps another tensor's bytes");
    if (range.first > covered)
      return Bad("unused bytes before tensor '" + name + "' (a hole in the data buffer)");
    covered = range.second;
  }
  if (covered != data.size()) return Bad("unused bytes at the end of the data buffer");
  return out;
}

}  // namespace kvstash::dckv
