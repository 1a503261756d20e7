#include "store/meta_record.h"

#include <vector>

#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash::store {

std::string EncodeMetaRecord(const MetaRecord& r) {
  std::vector<uint8_t> out;
  out.reserve(kMetaRecordBytes);
  ByteWriter w(&out);
  w.U32(kMetaMagic);
  w.U16(kMetaVersion);
  w.U16(r.flags);
  w.U16(r.codec);
  w.U8(r.tiers);
  w.U8(0);  // reserved
  w.U32(r.tokens);
  w.Bytes(r.parent);
  w.U64(r.payload_bytes);
  w.U64(r.payload_checksum);
  w.U64(r.state_bytes);
  w.U64(r.state_checksum);
  w.U64(r.created_ms);
  w.U64(r.last_access_ms);
  w.U32(r.hits);
  w.U32(Crc32c(out));
  return std::string(out.begin(), out.end());
}

Result<MetaRecord> DecodeMetaRecord(std::span<const uint8_t> bytes) {
  if (bytes.size() != kMetaRecordBytes) {
    return Status::Corruption("meta record of " + std::to_string(bytes.size()) +
                              " bytes, expected " + std::to_string(kMetaRecordBytes));
  }
  ByteReader rd(bytes);
  uint32_t magic = 0, crc = 0;
  uint16_t version = 0;
  uint8_t reserved = 0;
  MetaRecord r;
  std::span<const uint8_t> parent;
  // Sizes were checked above, so every read succeeds.
  rd.U32(&magic);
  rd.U16(&version);
  rd.U16(&r.flags);
  rd.U16(&r.codec);
  rd.U8(&r.tiers);
  rd.U8(&reserved);
  rd.U32(&r.tokens);
  rd.Take(r.parent.size(), &parent);
  std::copy(parent.begin(), parent.end(), r.parent.begin());
  rd.U64(&r.payload_bytes);
  rd.U64(&r.payload_checksum);
  rd.U64(&r.state_bytes);
  rd.U64(&r.state_checksum);
  rd.U64(&r.created_ms);
  rd.U64(&r.last_access_ms);
  rd.U32(&r.hits);
  rd.U32(&crc);
  if (magic != kMetaMagic) return Status::Corruption("meta record magic mismatch");
  if (Crc32c(bytes.first(kMetaRecordBytes - 4)) != crc) {
    return Status::Corruption("meta record CRC32C mismatch");
  }
  if (version != kMetaVersion) {
    return Status::Mismatch("meta record version " + std::to_string(version) +
                            " not readable (this build reads " +
                            std::to_string(kMetaVersion) + ")");
  }
  if (reserved != 0 || (r.flags & ~kMetaKnownFlags) != 0 ||
      (r.tiers & ~(kMetaInT1 | kMetaInT2)) != 0) {
    return Status::Corruption("meta record has reserved bits set");
  }
  if (r.tokens == 0) return Status::Corruption("meta record with 0 tokens");
  if (((r.flags & kMetaHasState) != 0) != (r.state_bytes != 0)) {
    return Status::Corruption("meta record state flag disagrees with state size");
  }
  return r;
}

}  // namespace kvstash::store
