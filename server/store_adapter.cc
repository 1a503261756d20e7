#include "server/store_adapter.h"

#include <set>

namespace kvstash::server {
namespace {

Status CheckKeys(const nlohmann::json& doc, const char* where, const std::set<std::string>& keys) {
  if (!doc.is_object()) return Status::InvalidArgument(std::string(where) + " must be an object");
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!keys.count(it.key())) {
      return Status::InvalidArgument("unknown key \"" + it.key() + "\" in " + where);
    }
  }
  return Status::Ok();
}

template <typename T>
Status Get(const nlohmann::json& doc, const char* key, T* out) {
  auto it = doc.find(key);
  if (it == doc.end()) return Status::Ok();
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) return Status::InvalidArgument(std::string(key) + " must be a boolean");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) return Status::InvalidArgument(std::string(key) + " must be a string");
    } else if constexpr (std::is_integral_v<T>) {
      if (!it->is_number_integer() || (std::is_unsigned_v<T> && !it->is_number_unsigned())) {
        return Status::InvalidArgument(std::string("store.") + key + " must be an integer");
      }
    }
    *out = it->template get<T>();
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("store.") + key + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace

Result<store::StoreOptions> StoreOptionsFromJson(const nlohmann::json& doc) {
  KVSTASH_RETURN_IF_ERROR(CheckKeys(doc, "store",
                                    {"path", "memory_budget_bytes", "disk_budget_bytes",
                                     "remote_budget_bytes", "index_budget_bytes", "eviction",
                                     "eviction_samples", "lfu_decay_accesses", "blob_min_bytes",
                                     "sync_writes", "block_cache_bytes", "redis"}));
  store::StoreOptions o;
  KVSTASH_RETURN_IF_ERROR(Get(doc, "path", &o.path));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "memory_budget_bytes", &o.memory_budget_bytes));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "disk_budget_bytes", &o.disk_budget_bytes));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "remote_budget_bytes", &o.remote_budget_bytes));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "index_budget_bytes", &o.index_budget_bytes));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "eviction_samples", &o.eviction_samples));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "lfu_decay_accesses", &o.lfu_decay_accesses));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "blob_min_bytes", &o.blob_min_bytes));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "sync_writes", &o.sync_writes));
  KVSTASH_RETURN_IF_ERROR(Get(doc, "block_cache_bytes", &o.block_cache_bytes));
  std::string eviction = "lfu";
  KVSTASH_RETURN_IF_ERROR(Get(doc, "eviction", &eviction));
  if (eviction == "lfu") o.eviction = store::EvictionPolicy::kLfuDecay;
  else if (eviction == "lru") o.eviction = store::EvictionPolicy::kLru;
  else return Status::InvalidArgument("store.eviction must be \"lfu\" or \"lru\"");
  if (auto it = doc.find("redis"); it != doc.end()) {
    KVSTASH_RETURN_IF_ERROR(CheckKeys(*it, "store.redis",
                                      {"endpoints", "key_prefix", "connect_timeout_ms",
                                       "command_timeout_ms", "lookup_remote"}));
    if (auto e = it->find("endpoints"); e != it->end()) {
      if (!e->is_array()) return Status::InvalidArgument("store.redis.endpoints must be an array");
      for (const auto& ep : *e) {
        if (!ep.is_string()) return Status::InvalidArgument("store.redis.endpoints: strings only");
        o.redis.endpoints.push_back(ep.get<std::string>());
      }
    }
    KVSTASH_RETURN_IF_ERROR(Get(*it, "key_prefix", &o.redis.key_prefix));
    KVSTASH_RETURN_IF_ERROR(Get(*it, "connect_timeout_ms", &o.redis.connect_timeout_ms));
    KVSTASH_RETURN_IF_ERROR(Get(*it, "command_timeout_ms", &o.redis.command_timeout_ms));
    KVSTASH_RETURN_IF_ERROR(Get(*it, "lookup_remote", &o.redis.lookup_remote));
  }
  return o;
}

Result<std::unique_ptr<StoreChunkStore>> StoreChunkStore::Open(const nlohmann::json& doc) {
  KVSTASH_ASSIGN_OR_RETURN(store::StoreOptions o, StoreOptionsFromJson(doc));
  KVSTASH_ASSIGN_OR_RETURN(std::unique_ptr<store::Store> s, store::Store::Open(o));
  const bool remote = !o.redis.endpoints.empty() && o.redis.lookup_remote;
  return std::make_unique<StoreChunkStore>(std::move(s), remote);
}

Result<LookupResult> StoreChunkStore::Lookup(std::span<const StoredKey> keys, bool require_state) {
  KVSTASH_ASSIGN_OR_RETURN(store::LookupResult r, store_->Lookup(keys, require_state));
  return LookupResult{static_cast<uint32_t>(r.keys.size()), r.matched_tokens};
}

Status StoreChunkStore::Put(const PutChunk& w) {
  store::PutChunk p;
  p.key = w.key;
  p.has_parent = w.parent.has_value();
  if (w.parent) p.parent = *w.parent;
  p.tokens = w.tokens;
  p.partial = w.partial;
  p.codec = w.codec;
  p.payload = w.payload;
  p.state = w.state;
  return store_->Put(std::span<const store::PutChunk>(&p, 1));
}

Result<std::optional<ChunkRead>> StoreChunkStore::Get(const StoredKey& key) {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<store::ChunkData> d,
                           store_->Get(std::span<const StoredKey>(&key, 1)));
  if (d.size() != 1) return Status::Internal("store Get returned a wrong count");
  if (d[0].corrupt) {
    return Status::Corruption("the stored chunk failed its checksum and was dropped");
  }
  if (!d[0].found) return std::optional<ChunkRead>();
  return std::optional<ChunkRead>(ChunkRead{d[0].payload, d[0].state});
}

Result<uint64_t> StoreChunkStore::Delete(const StoredKey& key) {
  return store_->Delete(std::span<const StoredKey>(&key, 1));
}

Result<uint64_t> StoreChunkStore::SetPinned(const StoredKey& key, bool pinned) {
  const std::span<const StoredKey> keys(&key, 1);
  return pinned ? store_->Pin(keys) : store_->Unpin(keys);
}

StoreSnapshot StoreChunkStore::Snapshot() const {
  const store::StoreStats s = store_->Stats();
  StoreSnapshot out;
  for (int i = 0; i < store::kNumTiers; ++i) {
    const store::TierStats& t = s.tiers[i];
    out.tiers.push_back({store::TierName(static_cast<store::Tier>(i)), s.enabled[i], t.entries,
                         t.bytes, t.budget_bytes, t.hits, t.evictions, t.promotions,
                         i != static_cast<int>(store::Tier::kRemote) || s.t2_up, t.errors});
    const bool disk = i == static_cast<int>(store::Tier::kDisk);
    out.tiers.back().writes_failing = disk && s.t1_writes_failing;
    out.tiers.back().read_only = disk && s.t1_read_only;
    out.tiers.back().read_only_filesystem = disk && s.t1_read_only_filesystem;
    out.tiers.back().needs_restart = disk && s.t1_needs_restart;
    if (disk) {
      out.tiers.back().disk_free_bytes = s.t1_disk_free_bytes;
      out.tiers.back().free_bytes_needed = s.t1_free_bytes_needed;
    }
  }
  out.checksum_failures = s.checksum_failures;
  out.pinned_entries = s.pinned_entries;
  out.index_entries = s.index_entries;
  return out;
}

}  // namespace kvstash::server
