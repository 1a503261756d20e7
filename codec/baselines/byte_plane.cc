#include "codec/baselines/byte_plane.h"

#include "codec/entropy/rans.h"
#include "codec/entropy/table_builder.h"
#include "common/byte_io.h"

namespace kvstash::baselines {
namespace {
constexpr int kPrecision = 12;
}  // namespace

std::vector<uint8_t> SplitBytePlanes(std::span<const uint8_t> data, size_t width) {
  const size_t n = data.size() / width;
  std::vector<uint8_t> planes(data.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < width; ++p) planes[p * n + i] = data[i * width + p];
  }
  return planes;
}

void MergeBytePlanes(std::span<const uint8_t> planes, size_t width, std::span<uint8_t> out) {
  const size_t n = out.size() / width;
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < width; ++p) out[i * width + p] = planes[p * n + i];
  }
}

Result<std::vector<uint8_t>> EncodeBytePlanePayload(const KvChunkView& chunk,
                                                    const Digest256& model_fingerprint,
                                                    uint32_t token_offset) {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  const size_t width = DTypeSize(chunk.layout.dtype);
  const size_t n = chunk.data.size() / width;
  std::vector<uint8_t> body;
  ByteWriter w(&body);
  w.U32(static_cast<uint32_t>(width));
  const std::vector<uint8_t> planes = SplitBytePlanes(chunk.data, width);
  for (size_t p = 0; p < width; ++p) {
    const std::span<const uint8_t> plane(planes.data() + p * n, n);
    std::vector<double> hist(256, 0.0);
    for (uint8_t b : plane) hist[b] += 1.0;
    entropy::TableBuildOptions o;
    o.precision = kPrecision;
    KVSTASH_ASSIGN_OR_RETURN(auto table, entropy::BuildTable(hist, o));
    const std::vector<uint8_t> tb = table.Serialize();
    w.U32(static_cast<uint32_t>(tb.size()));
    w.Bytes(tb);
    std::vector<entropy::FrequencyTable> one;
    one.push_back(std::move(table));
    KVSTASH_ASSIGN_OR_RETURN(auto set, entropy::TableSet::Create(std::move(one)));
    KVSTASH_ASSIGN_OR_RETURN(auto stream, entropy::RansEncode(plane, {}, set));
    w.U32(static_cast<uint32_t>(stream.size()));
    w.Bytes(stream);
  }
  for (float s : chunk.scales) w.U32(Bits(s));
  return BuildPayload(
      ChunkPayloadHeader(CodecId::kBytePlane, chunk, token_offset, /*partial=*/false, model_fingerprint),
      body);
}

Result<KvChunk> DecodeBytePlanePayload(std::span<const uint8_t> payload) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadView pv, ParsePayload(payload));
  if (pv.header.codec != CodecId::kBytePlane) return Status::Mismatch("not a byte-plane payload");
  KvChunk out = KvChunk::Zeros(pv.header.layout, pv.header.tokens);
  const size_t width = DTypeSize(out.layout.dtype);
  const size_t n = out.data.size() / width;
  ByteReader r(pv.body);
  uint32_t planes = 0;
  if (!r.U32(&planes) || planes != width) return Status::Corruption("byte-plane body: plane count");
  std::vector<uint8_t> plane_bytes(n * width);
  for (size_t p = 0; p < width; ++p) {
    uint32_t tb_len = 0, st_len = 0;
    std::span<const uint8_t> tb, st;
    if (!r.U32(&tb_len) || !r.Take(tb_len, &tb)) return Status::Corruption("byte-plane body truncated");
    size_t used = 0;
    KVSTASH_ASSIGN_OR_RETURN(auto table, entropy::FrequencyTable::Parse(tb, &used));
    if (used != tb.size() || table.symbol_bits() != 8) return Status::Corruption("byte-plane table");
    std::vector<entropy::FrequencyTable> one;
    one.push_back(std::move(table));
    KVSTASH_ASSIGN_OR_RETURN(auto set, entropy::TableSet::Create(std::move(one)));
    if (!r.U32(&st_len) || !r.Take(st_len, &st)) return Status::Corruption("byte-plane body truncated");
    KVSTASH_RETURN_IF_ERROR(entropy::RansDecode(st, {}, set, std::span<uint8_t>(plane_bytes.data() + p * n, n)));
  }
  MergeBytePlanes(plane_bytes, width, out.data);
  for (float& s : out.scales) {
    uint32_t b = 0;
    if (!r.U32(&b)) return Status::Corruption("byte-plane body truncated in scales");
    s = FromBits(b);
  }
  if (r.remaining() != 0) return Status::Corruption("byte-plane body has trailing bytes");
  if (out.ContentChecksum() != pv.header.content_checksum) {
    return Status::Corruption("byte-plane: decoded chunk fails its content checksum");
  }
  return out;
}

}  // namespace kvstash::baselines
