// Values passed into and out of a Store (store/store.h): what a Put writes, what a
// Lookup and a Get return, and the Stats counters.
//
// Payloads and state records are opaque bytes to the store (in practice chunk payloads
// of kvstash/payload_format.h and records of EncodeStateRecord). The store keeps its own
// XXH3-64 of each and verifies it on every read from every tier.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstash/prefix_key.h"

namespace kvstash::store {

enum class Tier : uint8_t { kMemory = 0, kDisk = 1, kRemote = 2 };
inline constexpr int kNumTiers = 3;
// "T0" / "T1" / "T2".
const char* TierName(Tier tier);

// Largest payload or state record the store accepts (bytes). Values must fit the u32
// sizes of the index entries; a 256-token chunk of a 70B model in bf16 is ~84 MB.
inline constexpr uint64_t kMaxValueBytes = 1ull << 30;

// One chunk of a Put (the put record; the client and the server call theirs PutChunk
// too). Spans are borrowed for the duration of the call.
struct PutChunk {
  StoredKey key{};          // ChunkKey::stored() of this chunk
  bool has_parent = false;  // false only for the first chunk of a prefix
  StoredKey parent{};       // key of the previous chunk when has_parent
  uint32_t tokens = 0;      // tokens in this chunk (1..kMaxChunkTokens)
  bool partial = false;     // final partial chunk (keyed with kind 0x02)
  uint16_t codec = 0;       // CodecId of the payload (informational for the store)
  std::span<const uint8_t> payload;  // non-empty
  // Recurrent-state record at this chunk's end boundary (hybrid models); empty: none.
  std::span<const uint8_t> state;
};

// What Store::Lookup found: the longest run of stored chunks from a chain's start.
struct LookupResult {
  uint64_t matched_tokens = 0;       // tokens covered by the matched chunks
  std::vector<StoredKey> keys;       // keys of the matched chunks, in prefix order
  std::vector<Tier> tiers;           // fastest tier holding each matched chunk
};

// Immutable shared bytes: a T0 hit shares the stored buffer, no copy.
using SharedBytes = std::shared_ptr<const std::string>;

struct ChunkData {
  StoredKey key{};
  bool found = false;      // false: miss (absent, evicted, or dropped as corrupt)
  // The entry was stored but failed a checksum on this read and was dropped (found is
  // false): a damaged disk or shared tier, which a caller reports as corruption, not as
  // absence.
  bool corrupt = false;
  Tier tier = Tier::kMemory;  // tier that served it (when found)
  uint32_t tokens = 0;
  bool partial = false;
  uint16_t codec = 0;
  SharedBytes payload;     // non-null when found
  SharedBytes state;       // null when the chunk has no state record

  std::span<const uint8_t> payload_bytes() const;
  std::span<const uint8_t> state_bytes() const;  // empty when no state
};

struct TierStats {
  uint64_t entries = 0;     // entries resident
  uint64_t bytes = 0;       // payload + state bytes resident
  uint64_t budget_bytes = 0;
  uint64_t hits = 0;        // Get hits served by this tier
  uint64_t evictions = 0;   // entries evicted from this tier (demoted or removed)
  uint64_t promotions = 0;  // entries copied into this tier by a hit below it
  uint64_t errors = 0;      // failed operations of the engine behind this tier
};

struct StoreStats {
  bool enabled[kNumTiers] = {};
  // False while T2 is on but Redis cannot be reached (store/redis_tier.h: the store
  // serves from T0/T1 meanwhile and reconnects in the background).
  bool t2_up = true;
  // True after a T1 write failed (disk full, I/O error) until RocksDB has resumed: Puts
  // fail meanwhile, reads are served.
  bool t1_writes_failing = false;
  // True when T1 was opened read-only because its disk was full at Open (store/
  // rocks_tier.h): t1_writes_failing too, until the store is reopened with space.
  bool t1_read_only = false;
  // t1_read_only because T1's file system is mounted read-only, not full.
  bool t1_read_only_filesystem = false;
  // True when T1's WAL failed (a full disk) and RocksDB cannot resume it in place
  // (rocks_tier.h, Write): t1_writes_failing too; writes fail, reads are served, until
  // the store is reopened.
  bool t1_needs_restart = false;
  // Bytes available on T1's file system, and the free bytes it needs before writes work
  // again (RocksTier::FreeBytesNeeded: RocksDB's 64 MiB reserve to resume in place; the
  // write-ahead log plus 1 MiB to restart when read-only or needing a restart). 0 without T1.
  uint64_t t1_disk_free_bytes = 0;
  uint64_t t1_free_bytes_needed = 0;
  TierStats tiers[kNumTiers];
  uint64_t lookups = 0;
  uint64_t lookup_chunks = 0;          // chunk keys examined by Lookups
  uint64_t lookup_hit_chunks = 0;      // chunk keys matched by Lookups
  uint64_t lookup_hit_tokens = 0;
  uint64_t gets = 0;                   // keys asked by Gets
  uint64_t get_misses = 0;
  uint64_t puts = 0;                   // chunks written by Puts
  uint64_t put_bytes = 0;              // payload + state bytes written by Puts
  uint64_t put_failures = 0;           // Put calls that returned an error
  uint64_t deletes = 0;                // entries removed by Delete (incl. descendants)
  uint64_t checksum_failures = 0;      // entries dropped because a checksum failed
  uint64_t index_evictions = 0;        // entries removed to keep the index in budget
  uint64_t index_entries = 0;
  uint64_t index_bytes = 0;            // memory of the index (see StoreOptions)
  uint64_t index_budget_bytes = 0;
  uint64_t pinned_entries = 0;
};

struct VerifyReport {
  uint64_t entries = 0;   // entries examined (T0 and T1; T2 copies are not read)
  uint64_t verified = 0;  // entries whose payload and state checksums hold
  uint64_t dropped = 0;   // entries dropped (checksum failure, missing value)
};

}  // namespace kvstash::store
