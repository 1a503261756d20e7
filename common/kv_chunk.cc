#include "kvstash/kv_chunk.h"

#include <set>
#include <string>

#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash {

Status KvLayout::Validate() const {
  if (n_layers == 0 || n_layers > kMaxLayers) {
    return Status::InvalidArgument("n_layers " + std::to_string(n_layers) +
                                   " outside 1.." + std::to_string(kMaxLayers));
  }
  if (n_kv_heads == 0 || n_kv_heads > kMaxKvHeads) {
    return Status::InvalidArgument("n_kv_heads " + std::to_string(n_kv_heads) +
                                   " outside 1.." + std::to_string(kMaxKvHeads));
  }
  if (head_dim == 0 || head_dim > kMaxHeadDim) {
    return Status::InvalidArgument("head_dim " + std::to_string(head_dim) + " outside 1.." +
                                   std::to_string(kMaxHeadDim));
  }
  switch (dtype) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kF32:
    case DType::kFP8E4M3:
      return Status::Ok();
    default:
      return Status::InvalidArgument("KV dtype must be bf16, f16, f32 or fp8_e4m3, got " +
                                     std::string(DTypeName(dtype)));
  }
}

Status KvChunkView::Validate() const {
  KVSTASH_RETURN_IF_ERROR(layout.Validate());
  if (tokens == 0 || tokens > kMaxChunkTokens) {
    return Status::InvalidArgument("chunk token count " + std::to_string(tokens) +
                                   " outside 1.." + std::to_string(kMaxChunkTokens));
  }
  if (data.size() != layout.DataBytes(tokens)) {
    return Status::InvalidArgument("chunk data has " + std::to_string(data.size()) +
                                   " bytes, layout needs " +
                                   std::to_string(layout.DataBytes(tokens)));
  }
  if (scales.size() != layout.NumScales()) {
    return Status::InvalidArgument("chunk has " + std::to_string(scales.size()) +
                                   " scales, layout needs " +
                                   std::to_string(layout.NumScales()));
  }
  return Status::Ok();
}

std::span<const uint8_t> KvChunkView::K(uint32_t l) const {
  const uint64_t n = layout.ScalarsPerTensor(tokens) * DTypeSize(layout.dtype);
  return data.subspan(2 * l * n, n);
}

std::span<const uint8_t> KvChunkView::V(uint32_t l) const {
  const uint64_t n = layout.ScalarsPerTensor(tokens) * DTypeSize(layout.dtype);
  return data.subspan((2 * l + 1) * n, n);
}

uint64_t KvChunkView::ContentChecksum() const {
  Xxh3Hasher h;
  h.Update(data);
  std::vector<uint8_t> le;
  le.reserve(scales.size() * 4);
  ByteWriter w(&le);
  for (float s : scales) w.U32(Bits(s));
  h.Update(le);
  return h.Digest();
}

KvChunk KvChunk::Zeros(const KvLayout& layout, uint32_t tokens) {
  KvChunk c;
  c.layout = layout;
  c.tokens = tokens;
  c.data.assign(layout.DataBytes(tokens), 0);
  c.scales.assign(layout.NumScales(), 1.0f);
  return c;
}

std::span<uint8_t> KvChunk::MutableK(uint32_t l) {
  const uint64_t n = layout.ScalarsPerTensor(tokens) * DTypeSize(layout.dtype);
  return std::span<uint8_t>(data).subspan(2 * l * n, n);
}

std::span<uint8_t> KvChunk::MutableV(uint32_t l) {
  const uint64_t n = layout.ScalarsPerTensor(tokens) * DTypeSize(layout.dtype);
  return std::span<uint8_t>(data).subspan((2 * l + 1) * n, n);
}

Status StateTensor::Validate() const {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return Status::InvalidArgument("state tensor name must have 1.." +
                                   std::to_string(kMaxNameBytes) + " bytes");
  }
  if (shape.empty() || shape.size() > kMaxRank) {
    return Status::InvalidArgument("state tensor '" + name + "' rank " +
                                   std::to_string(shape.size()) + " outside 1..8");
  }
  const size_t elem = DTypeSize(dtype);
  if (elem == 0) return Status::InvalidArgument("state tensor '" + name + "' has bad dtype");
  uint64_t count = 1;
  for (uint64_t d : shape) {
    if (d == 0 || d > (1ull << 40) || count > (1ull << 40) / d) {
      return Status::InvalidArgument("state tensor '" + name + "' has a bad dimension");
    }
    count *= d;
  }
  if (count * elem != data.size()) {
    return Status::InvalidArgument("state tensor '" + name + "' has " +
                                   std::to_string(data.size()) + " bytes, shape needs " +
                                   std::to_string(count * elem));
  }
  return Status::Ok();
}

Status RecurrentState::Validate() const {
  std::set<std::string> names;
  for (const StateTensor& t : tensors) {
    KVSTASH_RETURN_IF_ERROR(t.Validate());
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("duplicate state tensor name '" + t.name + "'");
    }
  }
  return Status::Ok();
}

uint64_t RecurrentState::ContentChecksum() const {
  Xxh3Hasher h;
  for (const StateTensor& t : tensors) {
    std::vector<uint8_t> meta;
    ByteWriter w(&meta);
    w.U16(static_cast<uint16_t>(t.name.size()));
    w.Bytes(t.name);
    w.U8(static_cast<uint8_t>(t.dtype));
    w.U8(static_cast<uint8_t>(t.shape.size()));
    for (uint64_t d : t.shape) w.U64(d);
    h.Update(meta);
    h.Update(t.data);
  }
  return h.Digest();
}

uint64_t RecurrentState::DataBytes() const {
  uint64_t n = 0;
  for (const StateTensor& t : tensors) n += t.data.size();
  return n;
}

}  // namespace kvstash
