// Options of a kvstash store: paths, per-tier byte budgets, the index budget, the
// shared Redis tier and the eviction policy. Every field has its default written down;
// none can change after Store::Open (reopen to change them).
//
// Tiers (docs/architecture.md §5):
//   T0  process memory: stored payloads as given (already codec-compressed), bounded by
//       memory_budget_bytes. A cache in front of T1 when T1 is on (T0 ⊆ T1).
//   T1  RocksDB on local disk at `path`: column families meta / payload (BlobDB) /
//       state, WAL on. Durable: the index is rebuilt from it at Open.
//   T2  Redis (single node or Redis Cluster) shared by several kvstash nodes; entries
//       land there when T1 (or T0 without T1) evicts them, and hits promote them back.
// At least one of T0 and T1 must be on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace kvstash::store {

// How a tier picks its victim among the entries it may evict (unpinned entries with
// no child chunk in that tier: the tail of a prefix chain goes first).
enum class EvictionPolicy : uint8_t {
  // Sampled LFU with decay, the algorithm of Redis' allkeys-lfu (evict.c:
  // LFULogIncr / LFUDecrAndReturn): an 8-bit logarithmic hit counter that decays by one
  // per `lfu_decay_accesses` store accesses (GET hits and inserts) without a hit;
  // among `eviction_samples` random candidates the lowest counter goes, ties broken by
  // the oldest access.
  kLfuDecay = 0,
  // Sampled LRU: among `eviction_samples` random candidates the least recently
  // accessed goes.
  kLru = 1,
};

struct RedisOptions {
  // "host:port" of one or more Redis nodes. Empty: T2 off. With Redis Cluster, any
  // subset of the nodes; the slot map is read with CLUSTER SLOTS and kept current
  // from MOVED/ASK replies. A node without cluster support is used as a single node.
  // Default: empty.
  std::vector<std::string> endpoints;
  // Prefix of every Redis key this store writes ("<prefix><32 hex digits>").
  // Default: "kvstash:".
  std::string key_prefix = "kvstash:";
  // Connect and per-command timeouts in milliseconds. Default: 500 and 2000.
  int connect_timeout_ms = 500;
  int command_timeout_ms = 2000;
  // MOVED/ASK redirections followed per command before giving up (Unavailable).
  // Default: 5.
  int max_redirects = 5;
  // Lookup asks T2 (one pipelined batch) for the chunks after the locally indexed run,
  // so that chunks other nodes demoted are found. Default: true.
  bool lookup_remote = true;
};

struct StoreOptions {
  // Directory of the RocksDB database (T1); created if missing. Empty: T1 off.
  // Default: empty.
  std::string path;
  // T0 byte budget (payload + state bytes held in memory). 0: T0 off. Default: 1 GiB.
  uint64_t memory_budget_bytes = 1ull << 30;
  // T1 byte budget (payload + state bytes stored in RocksDB; RocksDB's own overhead
  // comes on top). Default: 64 GiB.
  uint64_t disk_budget_bytes = 64ull << 30;
  // T2 byte budget: bytes this node has demoted to Redis (or promoted from it) and
  // still tracks; each demotion first evicts from T2 to stay within it. The Redis
  // servers' own maxmemory policy bounds the shared pool as a whole. Default: 64 GiB.
  uint64_t remote_budget_bytes = 64ull << 30;
  // Bound on the memory of the in-process index (entry table, key hash table and
  // eviction candidate sets). When a new entry would exceed it, whole entries are
  // evicted (same policy, tails first). Default: 256 MiB (~1.7 M chunks at the
  // measured 153 bytes per chunk).
  uint64_t index_budget_bytes = 256ull << 20;
  RedisOptions redis;
  EvictionPolicy eviction = EvictionPolicy::kLfuDecay;
  // Random candidates examined per eviction. Default: 16.
  uint32_t eviction_samples = 16;
  // kLfuDecay: store accesses (Get hits) per one-step decay of an idle entry's counter.
  // Default: 4096.
  uint32_t lfu_decay_accesses = 4096;
  // Payload and state values of at least this many bytes go to RocksDB blob files
  // (BlobDB, `min_blob_size`); smaller ones stay in the SST files. Default: 64 KiB.
  uint64_t blob_min_bytes = 64ull << 10;
  // fsync the WAL on every Put. Off: a Put survives a process crash (the WAL is in the
  // OS page cache) but not a power loss. Default: false.
  bool sync_writes = false;
  // RocksDB block cache for meta and small values. Default: 64 MiB.
  uint64_t block_cache_bytes = 64ull << 20;
  // Seed of the eviction sampler. Default: 0x6b767374.
  uint64_t seed = 0x6b767374;
  // Test seam: the RocksDB Env (e.g. one whose file system fails writes to simulate a
  // full disk). nullptr: rocksdb::Env::Default(). Default: nullptr.
  std::shared_ptr<rocksdb::Env> rocksdb_env;
};

}  // namespace kvstash::store
