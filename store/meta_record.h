// MetaRecord: the per-chunk metadata a Store persists, as the value of the T1 `meta`
// column family and as field "m" of the chunk's hash in T2. Byte layout (88 bytes,
// little-endian) in docs/format/store.md; this file implements it.
//
// A record is refused (Corruption) when it is short or long, its magic or CRC32C is
// wrong, or its reserved bits are set; Mismatch when its version is unknown.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash::store {

inline constexpr uint32_t kMetaMagic = 0x4D53564B;  // "KVSM"
inline constexpr uint16_t kMetaVersion = 1;
inline constexpr size_t kMetaRecordBytes = 88;

// MetaRecord::flags bits.
inline constexpr uint16_t kMetaPartial = 1u << 0;    // final partial chunk
inline constexpr uint16_t kMetaHasState = 1u << 1;   // a state record exists
inline constexpr uint16_t kMetaPinned = 1u << 2;     // exempt from eviction
inline constexpr uint16_t kMetaHasParent = 1u << 3;  // `parent` is meaningful
inline constexpr uint16_t kMetaKnownFlags = 0x000F;
// MetaRecord::tiers bits: where this node keeps the chunk's bytes.
inline constexpr uint8_t kMetaInT1 = 1u << 0;
inline constexpr uint8_t kMetaInT2 = 1u << 1;

struct MetaRecord {
  uint16_t flags = 0;
  uint16_t codec = 0;
  uint8_t tiers = 0;
  uint32_t tokens = 0;
  StoredKey parent{};
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // XXH3-64 of the payload
  uint64_t state_bytes = 0;       // 0 when no state record
  uint64_t state_checksum = 0;    // XXH3-64 of the state record (0 when none)
  uint64_t created_ms = 0;        // unix time of the Put, milliseconds
  uint64_t last_access_ms = 0;    // unix time of the last Get hit persisted
  uint32_t hits = 0;              // Get hits persisted

  bool operator==(const MetaRecord&) const = default;
};

std::string EncodeMetaRecord(const MetaRecord& record);
Result<MetaRecord> DecodeMetaRecord(std::span<const uint8_t> bytes);

}  // namespace kvstash::store
