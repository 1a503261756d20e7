// The production ChunkStore: kvstash::store::Store (store/store.h) behind the server's
// ChunkStore interface, and the "store" section of the server config.
//
// Config keys (all optional; defaults are StoreOptions'): path, memory_budget_bytes,
// disk_budget_bytes, remote_budget_bytes, index_budget_bytes, eviction ("lfu" or
// "lru"), eviction_samples, lfu_decay_accesses, blob_min_bytes, sync_writes,
// block_cache_bytes, redis: { endpoints: ["host:port", ...], key_prefix,
// connect_timeout_ms, command_timeout_ms, lookup_remote }.
//
// Thread-safety: as store::Store (every method may run concurrently).
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "server/chunk_store.h"
#include "store/store.h"

namespace kvstash::server {

// Errors: InvalidArgument naming an unknown key or a wrongly typed value.
Result<store::StoreOptions> StoreOptionsFromJson(const nlohmann::json& doc);

class StoreChunkStore : public ChunkStore {
 public:
  // `remote_lookups`: the store asks T2 during Lookup (redis endpoints configured).
  StoreChunkStore(std::unique_ptr<store::Store> store, bool remote_lookups)
      : store_(std::move(store)), remote_lookups_(remote_lookups) {}
  // Opens the store described by the config section. Errors: StoreOptionsFromJson's,
  // store::Store::Open's.
  static Result<std::unique_ptr<StoreChunkStore>> Open(const nlohmann::json& doc);

  Result<LookupResult> Lookup(std::span<const StoredKey> keys, bool require_state) override;
  Status Put(const PutChunk& chunk) override;
  Result<std::optional<ChunkRead>> Get(const StoredKey& key) override;
  Result<uint64_t> Delete(const StoredKey& key) override;
  Result<uint64_t> SetPinned(const StoredKey& key, bool pinned) override;
  StoreSnapshot Snapshot() const override;
  bool LookupIsInMemory() const override { return !remote_lookups_; }

 private:
  std::unique_ptr<store::Store> store_;
  bool remote_lookups_;
};

}  // namespace kvstash::server
