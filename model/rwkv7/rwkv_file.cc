#include "model/rwkv7/rwkv_file.h"

#include <cstring>
#include <unordered_set>

#include "common/byte_io.h"
#include "kvstash/dtype.h"

namespace kvstash::rwkv7 {
namespace {

// Element size of a type we read; 0 for every other id.
size_t ReadableElementSize(uint32_t id) {
  switch (static_cast<RwkvDataType>(id)) {
    case RwkvDataType::kF32:
      return 4;
    case RwkvDataType::kF16:
      return 2;
    default:
      return 0;
  }
}

bool IsKnownType(uint32_t id) { return RwkvDataTypeName(id) != "unknown"; }

Status Corrupt(const std::string& what) { return Status::Corruption("rwkv file: " + what); }

}  // namespace

std::string_view RwkvDataTypeName(uint32_t id) {
  switch (id) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q5_0";
    case 8: return "Q5_1";
    case 9: return "Q8_0";
    default: return "unknown";
  }
}

uint64_t RwkvFileTensor::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return n;
}

Result<std::vector<float>> RwkvFileTensor::ToF32() const {
  const size_t esize = ReadableElementSize(data_type);
  if (esize == 0) {
    return Status::NotSupported("rwkv file: tensor " + name + " has type " +
                                std::string(RwkvDataTypeName(data_type)));
  }
  const uint64_t n = NumElements();
  if (data.size() != n * esize) return Corrupt("tensor " + name + " data size mismatch");
  std::vector<float> out(n);
  if (esize == 4) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t bits = LoadLe<uint32_t>(&data[4 * i]);
      std::memcpy(&out[i], &bits, 4);
    }
  } else {
    std::vector<uint16_t> half(n);
    for (uint64_t i = 0; i < n; ++i) half[i] = LoadLe<uint16_t>(&data[2 * i]);
    KVSTASH_RETURN_IF_ERROR(ConvertF16ToF32(half, out));
  }
  return out;
}

const RwkvFileTensor* RwkvFile::Find(std::string_view name) const {
  for (const RwkvFileTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<RwkvFile> ParseRwkvFile(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  uint32_t magic = 0;
  RwkvFile file;
  RwkvFileHeader& h = file.header;
  if (!r.U32(&magic) || !r.U32(&h.version) || !r.U32(&h.n_vocab) || !r.U32(&h.n_embd) ||
      !r.U32(&h.n_layer) || !r.U32(&h.data_type)) {
    return Corrupt("truncated header (" + std::to_string(bytes.size()) + " bytes)");
  }
  if (magic != kRwkvFileMagic) return Corrupt("bad magic");
  if (h.version != 100 && h.version != 101) {
    return Status::NotSupported("rwkv file: version " + std::to_string(h.version) +
                                " (only 100 and 101 are read)");
  }
  if (h.n_vocab == 0 || h.n_vocab > RwkvFileHeader::kMaxVocab || h.n_embd == 0 ||
      h.n_embd > RwkvFileHeader::kMaxEmbd || h.n_layer == 0 ||
      h.n_layer > RwkvFileHeader::kMaxLayers) {
    return Corrupt("header dimensions out of bounds");
  }
  if (!IsKnownType(h.data_type)) return Corrupt("unknown header data type");

  std::unordered_set<std::string> names;
  while (r.remaining() > 0) {
    const std::string where = "tensor record " + std::to_string(file.tensors.size());
    uint32_t n_dims = 0, name_len = 0, type = 0;
    if (!r.U32(&n_dims) || !r.U32(&name_len) || !r.U32(&type)) {
      return Corrupt(where + ": truncated record header");
    }
    if (n_dims == 0 || n_dims > RwkvFileTensor::kMaxDims) {
      return Corrupt(where + ": " + std::to_string(n_dims) + " dims");
    }
    if (name_len == 0 || name_len > RwkvFileTensor::kMaxNameBytes) {
      return Corrupt(where + ": name length " + std::to_string(name_len));
    }
    if (!IsKnownType(type)) return Corrupt(where + ": unknown data type " + std::to_string(type));
    RwkvFileTensor t;
    t.data_type = type;
    // The product is kept <= remaining bytes at every step, so it cannot overflow.
    uint64_t elements = 1;
    for (uint32_t i = 0; i < n_dims; ++i) {
      uint32_t d = 0;
      if (!r.U32(&d)) return Corrupt(where + ": truncated dims");
      if (d == 0) return Corrupt(where + ": zero dimension");
      if (d > r.remaining() || elements > r.remaining() / d) {
        return Corrupt(where + ": dims exceed the file size");
      }
      elements *= d;
      t.dims.push_back(d);
    }
    std::span<const uint8_t> name;
    if (!r.Take(name_len, &name)) return Corrupt(where + ": truncated name");
    t.name.assign(name.begin(), name.end());
    if (!names.insert(t.name).second) return Corrupt("duplicate tensor " + t.name);
    const size_t esize = ReadableElementSize(type);
    if (esize == 0) {
      return Status::NotSupported("rwkv file: tensor " + t.name + " is " +
                                  std::string(RwkvDataTypeName(type)) +
                                  " (only F32 and F16 are read)");
    }
    std::span<const uint8_t> data;
    if (elements > r.remaining() / esize || !r.Take(elements * esize, &data)) {
      return Corrupt("tensor " + t.name + ": data runs past the end of the file");
    }
    t.data.assign(data.begin(), data.end());
    file.tensors.push_back(std::move(t));
  }
  return file;
}

Result<std::vector<uint8_t>> SerializeRwkvFile(const RwkvFile& file) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  const RwkvFileHeader& h = file.header;
  w.U32(kRwkvFileMagic);
  w.U32(h.version);
  w.U32(h.n_vocab);
  w.U32(h.n_embd);
  w.U32(h.n_layer);
  w.U32(h.data_type);
  for (const RwkvFileTensor& t : file.tensors) {
    const size_t esize = ReadableElementSize(t.data_type);
    bool ok = esize != 0 && !t.dims.empty() && t.dims.size() <= RwkvFileTensor::kMaxDims &&
              !t.name.empty() && t.name.size() <= RwkvFileTensor::kMaxNameBytes;
    for (uint64_t d : t.dims) ok = ok && d >= 1 && d <= UINT32_MAX;
    if (!ok || t.data.size() != t.NumElements() * esize) {
      return Status::InvalidArgument("rwkv file: cannot write tensor '" + t.name + "'");
    }
    w.U32(static_cast<uint32_t>(t.dims.size()));
    w.U32(static_cast<uint32_t>(t.name.size()));
    w.U32(t.data_type);
    for (uint64_t d : t.dims) w.U32(static_cast<uint32_t>(d));
    w.Bytes(std::string_view(t.name));
    w.Bytes(t.data);
  }
  return out;
}

}  // namespace kvstash::rwkv7
