// MemoryChunkStore: an in-memory ChunkStore for fast tests of the request handler and
// the server core (a test seam, not a mock: it keeps real bytes and real prefix-chain
// semantics — parents must exist, Delete removes descendants — checked against the
// real store in the end-to-end tests).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "kvstash/prefix_key.h"
#include "server/chunk_store.h"

namespace kvstash::server::testing {

class MemoryChunkStore : public ChunkStore {
 public:
  Result<LookupResult> Lookup(std::span<const StoredKey> keys, bool require_state) override {
    std::lock_guard<std::mutex> l(mu_);
    LookupResult r, last_with_state;
    for (const StoredKey& k : keys) {
      auto it = entries_.find(k);
      if (it == entries_.end()) break;
      r.matched_chunks++;
      r.matched_tokens += it->second.tokens;
      if (it->second.read.state) last_with_state = r;
    }
    return require_state ? last_with_state : r;
  }
  Status Put(const PutChunk& w) override {
    std::lock_guard<std::mutex> l(mu_);
    if (w.parent && !entries_.count(*w.parent)) {  // worded as kvstash::store::Store's
      return Status::NotFound("Put chunk 0: parent " + ToHex(*w.parent) + " is not stored");
    }
    if (auto it = entries_.find(w.key); it != entries_.end() && it->second.parent != w.parent) {
      return Status::Mismatch("Put chunk 0: key " + ToHex(w.key) + " is stored with another parent");
    }
    Entry e;
    e.parent = w.parent;
    e.tokens = w.tokens;
    e.read.payload = std::make_shared<const std::string>(w.payload.begin(), w.payload.end());
    if (!w.state.empty()) e.read.state = std::make_shared<const std::string>(w.state.begin(), w.state.end());
    entries_[w.key] = std::move(e);
    return Status::Ok();
  }
  Result<std::optional<ChunkRead>> Get(const StoredKey& key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (corrupt_.count(key)) {  // worded as StoreChunkStore's
      return Status::Corruption("the stored chunk failed its checksum and was dropped");
    }
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::optional<ChunkRead>();
    return std::optional<ChunkRead>(it->second.read);
  }
  Result<uint64_t> Delete(const StoredKey& key) override {
    std::lock_guard<std::mutex> l(mu_);
    std::set<StoredKey> doomed;
    if (entries_.count(key)) doomed.insert(key);
    for (bool grew = true; grew;) {
      grew = false;
      for (auto& [k, e] : entries_) {
        if (e.parent && doomed.count(*e.parent) && doomed.insert(k).second) grew = true;
      }
    }
    for (const auto& k : doomed) {
      entries_.erase(k);
      pinned_.erase(k);
    }
    return static_cast<uint64_t>(doomed.size());
  }
  Result<uint64_t> SetPinned(const StoredKey& key, bool pinned) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!entries_.count(key)) return uint64_t{0};
    if (pinned) pinned_.insert(key);
    else pinned_.erase(key);
    return uint64_t{1};
  }
  StoreSnapshot Snapshot() const override {
    std::lock_guard<std::mutex> l(mu_);
    StoreSnapshot s;
    StoreSnapshot::Tier t;
    t.name = "T0";
    t.enabled = true;
    t.entries = entries_.size();
    for (auto& [k, e] : entries_) t.bytes += e.read.payload->size();
    t.budget_bytes = 1ull << 30;
    t.writes_failing = writes_failing;
    t.read_only = read_only;
    t.read_only_filesystem = read_only_filesystem;
    t.needs_restart = needs_restart;
    t.disk_free_bytes = disk_free_bytes;
    t.free_bytes_needed = free_bytes_needed;
    s.tiers.push_back(t);
    s.pinned_entries = pinned_.size();
    s.index_entries = entries_.size();
    return s;
  }
  bool LookupIsInMemory() const override { return true; }
  // What Snapshot() reports as the tier's writes_failing (a full disk, for tests).
  std::atomic<bool> writes_failing{false};
  // What Snapshot() reports as the tier's read_only (opened on a full disk, for tests).
  std::atomic<bool> read_only{false};
  // What Snapshot() reports as the tier's read_only_filesystem (for tests).
  std::atomic<bool> read_only_filesystem{false};
  // What Snapshot() reports as the tier's needs_restart (its WAL failed, for tests).
  std::atomic<bool> needs_restart{false};
  // What Snapshot() reports as the tier's free and needed disk bytes (for tests).
  std::atomic<uint64_t> disk_free_bytes{0}, free_bytes_needed{0};
  // The next Gets of `k` fail their checksum, as a damaged disk's would (for tests).
  void MarkCorrupt(const StoredKey& k) {
    std::lock_guard<std::mutex> l(mu_);
    corrupt_.insert(k);
  }
  bool IsPinned(const StoredKey& k) const {
    std::lock_guard<std::mutex> l(mu_);
    return pinned_.count(k) > 0;
  }

 private:
  struct Entry {
    std::optional<StoredKey> parent;
    uint32_t tokens = 0;
    ChunkRead read;
  };
  mutable std::mutex mu_;
  std::map<StoredKey, Entry> entries_;
  std::set<StoredKey> pinned_;
  std::set<StoredKey> corrupt_;
};

}  // namespace kvstash::server::testing
