// ChunkStore: what the server needs from a store of chunk payloads, in the server's
// terms. The production implementation wraps kvstash::store::Store (store_adapter.h);
// unit tests of the request handler use a small in-memory one.
//
// Keys reaching a ChunkStore are already tenant-scoped (tenants.h: ScopeKey).
//
// Thread-safety: implementations must allow every method to be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash::server {

// Immutable shared bytes (a hit from memory may share the stored buffer).
using SharedBytes = std::shared_ptr<const std::string>;

// One chunk of a PUT (the put record: kvstash::PutChunk in the client, store::PutChunk
// in the store), as the request handler hands it on.
struct PutChunk {
  StoredKey key{};
  std::optional<StoredKey> parent;  // previous chunk of the chain
  uint32_t tokens = 0;
  bool partial = false;
  uint16_t codec = 0;
  std::span<const uint8_t> payload;  // borrowed for the call
  std::span<const uint8_t> state;    // empty: no recurrent-state record
};

struct ChunkRead {
  SharedBytes payload;  // never null
  SharedBytes state;    // null when the chunk has no state record
};

// The answer to a LOOKUP: the matched run of a chain from its start.
struct LookupResult {
  uint32_t matched_chunks = 0;
  uint64_t matched_tokens = 0;  // sum of the matched chunks' stored token counts
};

// Occupancy and counters of the store for /metrics, /v1/stats and the dashboard.
struct StoreSnapshot {
  struct Tier {
    std::string name;  // "T0", "T1", "T2"
    bool enabled = false;
    uint64_t entries = 0, bytes = 0, budget_bytes = 0;
    uint64_t hits = 0, evictions = 0, promotions = 0;
    bool up = true;  // false: enabled but unreachable (T2 Redis down, reconnecting)
    uint64_t errors = 0;  // failed operations of the engine behind the tier (RocksDB, Redis)
    bool writes_failing = false;  // T1: its last write failed (disk full), not yet resumed
    bool read_only = false;       // T1: opened read-only (disk full at start-up) until a restart
    bool read_only_filesystem = false;  // T1: read_only because its file system is mounted so
    bool needs_restart = false;   // T1: its WAL failed on a full disk; no writes until a restart
    // T1: bytes available on its disk, and the free bytes it needs before writes work
    // again (store::StoreStats::t1_free_bytes_needed); 0 for the other tiers.
    uint64_t disk_free_bytes = 0, free_bytes_needed = 0;
  };
  std::vector<Tier> tiers;
  uint64_t checksum_failures = 0;  // entries the store dropped for a failed checksum
  uint64_t pinned_entries = 0;
  uint64_t index_entries = 0;
};

class ChunkStore {
 public:
  virtual ~ChunkStore() = default;
  // Longest run of present chunks from keys[0]; with `require_state` cut back to the
  // last chunk with a state record. Errors: Internal.
  virtual Result<LookupResult> Lookup(std::span<const StoredKey> keys, bool require_state) = 0;
  // Stores one chunk atomically (present entirely or not at all after a crash).
  // A stored key is overwritten only under the same parent (a chunk key has one).
  // Errors: InvalidArgument, NotFound (parent not stored), Mismatch (the key is stored
  // with another parent; nothing written), ResourceExhausted, IOError.
  virtual Status Put(const PutChunk& chunk) = 0;
  // The chunk, or std::nullopt on a miss. Errors: IOError.
  virtual Result<std::optional<ChunkRead>> Get(const StoredKey& key) = 0;
  // Removes the chunk and its descendants; returns entries removed. Errors: IOError.
  virtual Result<uint64_t> Delete(const StoredKey& key) = 0;
  // Pins or unpins; returns 1 when the key is stored, 0 otherwise. Errors: IOError.
  virtual Result<uint64_t> SetPinned(const StoredKey& key, bool pinned) = 0;
  virtual StoreSnapshot Snapshot() const = 0;
  // True when Lookup never waits on I/O (index in memory, no remote tier asked), so
  // the server may answer LOOKUPs on its socket threads instead of the worker pool.
  virtual bool LookupIsInMemory() const { return false; }
};

}  // namespace kvstash::server
