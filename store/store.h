// A Store is a tiered, crash-safe map from chunk keys (docs/format/keys.md) to chunk
// payloads and optional recurrent-state records, organised as prefix chains: every
// stored chunk but a prefix's first names its parent chunk, and a Lookup returns the
// longest run of stored chunks from a prefix's start.
//
// Guarantees
// - Never another key's bytes: every read from every tier checks the XXH3-64 kept at
//   Put time; a mismatch drops the entry (and its descendants, now unreachable),
//   counts a checksum failure and reports a miss.
// - Atomic Puts: with T1 on, all chunks (meta + payload + state) of one Put commit in
//   one RocksDB WriteBatch with the WAL on; after a crash a Put is fully present or
//   fully absent, and every Put that returned Ok before the crash is present. A failed
//   write (disk full) leaves nothing visible.
// - Snapshot reads: a Get reads RocksDB under one snapshot and T0 through shared
//   immutable buffers, so an eviction or Delete racing a Get never tears its bytes:
//   the Get returns the complete old bytes or a miss.
// - The index (entries, parents, pins) survives a clean restart and a crash: it is
//   rebuilt from the meta column family at Open.
// - Bounded memory: T0 payload bytes within memory_budget_bytes, index memory within
//   index_budget_bytes (whole entries are evicted to stay in it).
// - Eviction per tier by byte budget: only unpinned entries with no child chunk in that
//   tier are candidates (a prefix chain loses its tail first); among them the sampled
//   LFU-with-decay (or LRU) policy of StoreOptions::eviction picks. T0 evictions drop
//   the memory copy (or demote to T2 when T1 is off), T1 evictions demote to T2 when
//   it is on, T2 evictions remove. Hits promote: T1 -> T0, T2 -> T1 and T0.
//
// Thread-safety: every method may be called concurrently from any thread. Lookups
// take a shared lock on the in-memory index only; Gets read without holding the
// index lock during I/O; Puts, Deletes, Pins and evictions are serialised with each
// other by one writer mutex (RocksDB serialises its writes anyway).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "store/store_options.h"
#include "store/store_types.h"

namespace kvstash::store {

class Store {
 public:
  // Opens (creating when missing) the store described by `options`: the RocksDB
  // database at options.path (T1), a connection to the Redis endpoints (T2), and
  // rebuilds the index from T1's meta column family. On a full disk or a read-only
  // file system T1 opens read-only (StoreStats::t1_read_only): Gets and Lookups are
  // served, Put, Delete, Pin and Unpin fail with IOError until the store is reopened
  // where it can write.
  // Errors: InvalidArgument for inconsistent options (no T0 and no T1, budgets of 0
  // where a tier is on); IOError when RocksDB cannot open; Unavailable when Redis
  // endpoints are configured but none answers.
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);

  // Persists access statistics, flushes RocksDB's memtables and closes. Outstanding
  // calls must have returned.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Longest run of stored chunks from the start of `keys` (the chained keys of one
  // prefix, in order). With `require_state`, the run is cut back to its last chunk that has a
  // recurrent-state record (a hybrid model cannot resume anywhere else). Reads the
  // in-memory index under a shared lock, then (T2 on, lookup_remote) one pipelined
  // batch to Redis for the keys after the local run. Does not count as an access for
  // eviction. Errors: none besides Internal; a T2 failure ends the run (a miss).
  Result<LookupResult> Lookup(std::span<const StoredKey> keys, bool require_state);

  // Same for a token list under namespace digest `ns` with `chunk_tokens` per chunk:
  // the keys are ComputeChunkKeys(ns, tokens, chunk_tokens, include_partial=true); the
  // final partial chunk (if any) can match only when every full chunk matched.
  // Errors: InvalidArgument for chunk_tokens 0 or above kMaxChunkTokens.
  Result<LookupResult> Lookup(const Digest256& ns, std::span<const uint32_t> tokens, uint32_t chunk_tokens,
                              bool require_state);

  // Stores `chunks` atomically (see Guarantees). A chunk's parent must be stored
  // already or appear earlier in `chunks`. A key stored already is overwritten when
  // the chunk names the same parent (or, as before, none); a chunk key has one parent,
  // so no Put can re-link a stored key or close a cycle.
  // Errors: InvalidArgument (empty payload, value above kMaxValueBytes, tokens 0,
  // duplicate key in one Put, a chunk naming itself as parent); Mismatch when a stored
  // key's parent differs from the one this Put names (nothing of the Put is written;
  // Delete the key first to re-link it); NotFound when a parent
  // is neither stored nor in this Put (put the chain from its first missing chunk);
  // ResourceExhausted when pinned or in-flight entries leave no room in a budget;
  // IOError when RocksDB fails (nothing of this Put is visible then; after a full disk
  // RocksDB recovers in the background once space returns, and later Puts succeed;
  // always on a T1 opened read-only, before anything is evicted).
  Status Put(std::span<const PutChunk> chunks);

  // Reads `keys`: one ChunkData per key, in order (found == false for a miss). T0
  // first, then T1 in one MultiGet under one RocksDB snapshot, then T2 in one
  // pipelined batch. Every value is checked against its XXH3-64; hits are promoted and
  // counted as accesses. Errors: IOError when RocksDB reads fail (other than
  // not-found); T2 failures are misses.
  Result<std::vector<ChunkData>> Get(std::span<const StoredKey> keys);

  // Removes `keys` and all their descendant chunks from every tier (one WriteBatch
  // for T1). Absent keys are ignored. Returns the number of entries removed.
  // Errors: IOError from RocksDB (then nothing was removed from T1 or the index).
  Result<uint64_t> Delete(std::span<const StoredKey> keys);

  // Pins / unpins `keys`: a pinned entry is never evicted from any tier it is in (a
  // prefix's chunks are pinned together by passing all their keys). The pin persists
  // in T1. Returns the number of stored keys whose pin state was set (absent keys are
  // ignored). Errors: IOError from RocksDB.
  Result<uint64_t> Pin(std::span<const StoredKey> keys);
  Result<uint64_t> Unpin(std::span<const StoredKey> keys);

  // Counters and occupancy, consistent with each other at one instant.
  StoreStats Stats() const;

  // Reads every T0 and T1 entry and checks its checksums; drops the ones that fail.
  // Errors: IOError from RocksDB.
  Result<VerifyReport> VerifyAll();

  class Impl;

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::store
