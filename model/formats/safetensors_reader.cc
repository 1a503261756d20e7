#include "model/formats/safetensors_reader.h"

#include <nlohmann/json.hpp>

#include "common/byte_io.h"
#include "kvstash/dtype_bits.h"

namespace kvstash::model {
namespace {

uint64_t DtypeBytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

std::string ShapeString(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  KVSTASH_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  auto bad = [&](const std::string& m) { return Status::Corruption("safetensors " + path + ": " + m); };
  std::span<const uint8_t> b = mapped->bytes();
  if (b.size() < 8) return bad("shorter than its header length");
  const uint64_t n = LoadLe<uint64_t>(b.data());
  if (n > b.size() - 8) return bad("header length " + std::to_string(n) + " exceeds the file");
  nlohmann::json header = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n),
                                                nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("header is not a JSON object");
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->data_ = b.subspan(8 + n);
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      return bad("tensor " + name + " entry is malformed");
    }
    SafetensorInfo t;
    t.dtype = v["dtype"].get<std::string>();
    uint64_t elems = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return bad("tensor " + name + " has a bad shape");
      const uint64_t x = d.get<uint64_t>();
      if (x != 0 && elems > (uint64_t{1} << 48) / x) return bad("tensor " + name + " is too large");
      elems *= x;
      t.shape.push_back(x);
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) return bad("tensor " + name + " offsets");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    const uint64_t eb = DtypeBytes(t.dtype);
    if (eb == 0) return bad("tensor " + name + " has unknown dtype " + t.dtype);
    if (t.begin > t.end || t.end > f->data_.size() || t.end - t.begin != elems * eb) {
      return bad("tensor " + name + " byte range disagrees with its shape or the file size");
    }
    f->tensors_.emplace(name, std::move(t));
  }
  f->file_ = std::move(mapped);
  return f;
}

Result<std::vector<float>> SafetensorsFile::ReadF32(const std::string& name,
                                                    const std::vector<uint64_t>& shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Status::NotFound("safetensors tensor " + name + " absent");
  const SafetensorInfo& t = it->second;
  if (t.shape != shape) {
    return Status::InvalidArgument("safetensors tensor " + name + " has shape " + ShapeString(t.shape) +
                                   ", want " + ShapeString(shape));
  }
  const uint8_t* p = data_.data() + t.begin;
  const uint64_t n = (t.end - t.begin) / DtypeBytes(t.dtype);
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    for (uint64_t i = 0; i < n; ++i) out[i] = FromBits(LoadLe<uint32_t>(p + 4 * i));
  } else if (t.dtype == "F16") {
    for (uint64_t i = 0; i < n; ++i) out[i] = F16ToF32(LoadLe<uint16_t>(p + 2 * i));
  } else if (t.dtype == "BF16") {
    for (uint64_t i = 0; i < n; ++i) out[i] = Bf16ToF32(LoadLe<uint16_t>(p + 2 * i));
  } else {
    return Status::NotSupported("safetensors tensor " + name + " has dtype " + t.dtype +
                                " (F32, F16, BF16 supported)");
  }
  return out;
}

}  // namespace kvstash::model
