#include "codec/entropy/rans_segments.h"

#include <algorithm>
#include <string>

#include "codec/entropy/rans_format.h"
#include "common/byte_io.h"

namespace kvstash::entropy {
namespace {

constexpr size_t kFixedHeaderBytes = 16;

template <typename SymT>
Status EncodeSegmented(std::span<const SymT> symbols, std::span<const uint16_t> table_index,
                       const TableSet& tables, uint32_t segment_symbols,
                       std::vector<uint8_t>* out) {
  if (segment_symbols == 0 || segment_symbols % kRansLanes != 0) {
    return Status::InvalidArgument("rANS segments: segment_symbols must be a positive multiple of 32");
  }
  if (!table_index.empty() && table_index.size() != symbols.size()) {
    return Status::InvalidArgument("rANS segments: table_index length differs from symbols");
  }
  const uint64_t n = symbols.size();
  const uint64_t segments = (n + segment_symbols - 1) / segment_symbols;
  if (segments > 0xFFFFFFFFu) return Status::InvalidArgument("rANS segments: too many segments");
  std::vector<uint8_t> body;
  std::vector<uint32_t> sizes;
  sizes.reserve(segments);
  for (uint64_t s = 0; s < segments; ++s) {
    const size_t begin = s * segment_symbols;
    const size_t len = std::min<uint64_t>(segment_symbols, n - begin);
    const size_t before = body.size();
    KVSTASH_RETURN_IF_ERROR(RansEncodeAppend(
        symbols.subspan(begin, len),
        table_index.empty() ? table_index : table_index.subspan(begin, len), tables, &body));
    if (body.size() - before > 0xFFFFFFFFu) {
      return Status::InvalidArgument("rANS segments: a segment exceeds 4 GiB");
    }
    sizes.push_back(static_cast<uint32_t>(body.size() - before));
  }
  ByteWriter w(out);
  w.U64(n);
  w.U32(segment_symbols);
  w.U32(static_cast<uint32_t>(segments));
  for (uint32_t size : sizes) w.U32(size);
  w.Bytes(body);
  return Status::Ok();
}

template <typename OutT>
Status DecodeSegmented(std::span<const uint8_t> framed, std::span<const uint16_t> table_index,
                       const TableSet& tables, std::span<OutT> out, RansDecoder decoder) {
  KVSTASH_ASSIGN_OR_RETURN(SegmentDirectory dir, ParseSegmentDirectory(framed));
  if (dir.num_symbols != out.size()) {
    return Status::Corruption("rANS segments: stream holds " + std::to_string(dir.num_symbols) +
                              " symbols, caller expects " + std::to_string(out.size()));
  }
  if (!table_index.empty() && table_index.size() != out.size()) {
    return Status::InvalidArgument("rANS segments: table_index length differs from symbols");
  }
  for (uint32_t s = 0; s < dir.num_segments(); ++s) {
    const size_t begin = static_cast<size_t>(s) * dir.segment_symbols;
    const size_t len = dir.SegmentLength(s);
    Status st = RansDecode(
        framed.subspan(dir.offsets[s], dir.offsets[s + 1] - dir.offsets[s]),
        table_index.empty() ? table_index : table_index.subspan(begin, len), tables,
        out.subspan(begin, len), decoder);
    if (!st.ok()) return st.WithContext("segment " + std::to_string(s));
  }
  return Status::Ok();
}

}  // namespace

uint32_t SegmentDirectory::SegmentLength(uint32_t s) const {
  const uint64_t begin = uint64_t{s} * segment_symbols;
  return static_cast<uint32_t>(std::min<uint64_t>(segment_symbols, num_symbols - begin));
}

Result<SegmentDirectory> ParseSegmentDirectory(std::span<const uint8_t> framed) {
  ByteReader r(framed);
  SegmentDirectory dir;
  uint32_t segments = 0;
  if (!r.U64(&dir.num_symbols) || !r.U32(&dir.segment_symbols) || !r.U32(&segments)) {
    return Status::Corruption("rANS segments: truncated header");
  }
  if (dir.segment_symbols == 0 || dir.segment_symbols % kRansLanes != 0) {
    return Status::Corruption("rANS segments: bad segment length");
  }
  if (dir.num_symbols > (uint64_t{1} << 48)) {
    return Status::Corruption("rANS segments: symbol count above 2^48");
  }
  if (segments != (dir.num_symbols + dir.segment_symbols - 1) / dir.segment_symbols) {
    return Status::Corruption("rANS segments: segment count does not match symbol count");
  }
  if (r.remaining() / 4 < segments) return Status::Corruption("rANS segments: truncated directory");
  dir.offsets.resize(uint64_t{segments} + 1);
  uint64_t offset = kFixedHeaderBytes + uint64_t{segments} * 4;
  for (uint32_t s = 0; s < segments; ++s) {
    uint32_t size = 0;
    (void)r.U32(&size);
    if (size < static_cast<uint32_t>(kRansHeaderBytes) || size % 2 != 0) {
      return Status::Corruption("rANS segments: bad segment size");
    }
    dir.offsets[s] = offset;
    offset += size;
  }
  dir.offsets[segments] = offset;
  if (offset != framed.size()) {
    return Status::Corruption("rANS segments: sizes do not add up to the stream length");
  }
  return dir;
}

Status RansEncodeSegmentedAppend(std::span<const uint16_t> symbols,
                                 std::span<const uint16_t> table_index, const TableSet& tables,
                                 uint32_t segment_symbols, std::vector<uint8_t>* out) {
  return EncodeSegmented(symbols, table_index, tables, segment_symbols, out);
}
Status RansEncodeSegmentedAppend(std::span<const uint8_t> symbols,
                                 std::span<const uint16_t> table_index, const TableSet& tables,
                                 uint32_t segment_symbols, std::vector<uint8_t>* out) {
  return EncodeSegmented(symbols, table_index, tables, segment_symbols, out);
}
Status RansDecodeSegmented(std::span<const uint8_t> framed, std::span<const uint16_t> table_index,
                           const TableSet& tables, std::span<uint16_t> out, RansDecoder decoder) {
  return DecodeSegmented(framed, table_index, tables, out, decoder);
}
Status RansDecodeSegmented(std::span<const uint8_t> framed, std::span<const uint16_t> table_index,
                           const TableSet& tables, std::span<uint8_t> out, RansDecoder decoder) {
  return DecodeSegmented(framed, table_index, tables, out, decoder);
}

}  // namespace kvstash::entropy
