// Store: Open, Lookup, Stats and the index bookkeeping of Store::Impl. Put/Delete/Pin
// are in store_write.cc, Get/VerifyAll in store_read.cc, eviction in store_evict.cc.
#include "store/store.h"

#include <chrono>
#include <unordered_map>

#include "common/checksum.h"
#include "common/logging.h"
#include "store/store_impl.h"

namespace kvstash::store {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kMemory: return "T0";
    case Tier::kDisk: return "T1";
    case Tier::kRemote: return "T2";
  }
  return "T?";
}

std::span<const uint8_t> ChunkData::payload_bytes() const {
  if (!payload) return {};
  return {reinterpret_cast<const uint8_t*>(payload->data()), payload->size()};
}
std::span<const uint8_t> ChunkData::state_bytes() const {
  if (!state) return {};
  return {reinterpret_cast<const uint8_t*>(state->data()), state->size()};
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

void DescribeEntry(const MetaRecord& m, IndexEntry* e) {
  e->tokens = m.tokens;
  e->payload_bytes = static_cast<uint32_t>(m.payload_bytes);
  e->state_bytes = static_cast<uint32_t>(m.state_bytes);
  e->payload_checksum = m.payload_checksum;
  e->state_checksum = m.state_checksum;
  e->codec = m.codec;
  e->created_ms = m.created_ms;
  e->access_s = static_cast<uint32_t>(m.last_access_ms / 1000);
  e->hits = m.hits;
}

bool Matches(const SharedBytes& b, uint64_t size, uint64_t checksum) {
  if (!b) return size == 0;
  return b->size() == size && Xxh3_64(*b) == checksum;
}

// ------------------------------------------------------------------ Store (public)

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  KVSTASH_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Result<LookupResult> Store::Lookup(std::span<const StoredKey> keys, bool require_state) {
  return impl_->Lookup(keys, require_state);
}

Result<LookupResult> Store::Lookup(const Digest256& ns, std::span<const uint32_t> tokens,
                                   uint32_t chunk_tokens, bool require_state) {
  if (chunk_tokens == 0 || chunk_tokens > kMaxChunkTokens) {
    return Status::InvalidArgument("chunk_tokens " + std::to_string(chunk_tokens) +
                                   " outside 1.." + std::to_string(kMaxChunkTokens));
  }
  KVSTASH_ASSIGN_OR_RETURN(auto chunk_keys,
                           ComputeChunkKeys(ns, tokens, chunk_tokens, /*include_partial=*/true));
  std::vector<StoredKey> keys;
  keys.reserve(chunk_keys.size());
  for (const ChunkKey& k : chunk_keys) keys.push_back(k.stored());
  return impl_->Lookup(keys, require_state);
}

Status Store::Put(std::span<const PutChunk> chunks) { return impl_->Put(chunks); }
Result<std::vector<ChunkData>> Store::Get(std::span<const StoredKey> keys) {
  return impl_->Get(keys);
}
Result<uint64_t> Store::Delete(std::span<const StoredKey> keys) { return impl_->Delete(keys); }
Result<uint64_t> Store::Pin(std::span<const StoredKey> keys) {
  return impl_->SetPinned(keys, true);
}
Result<uint64_t> Store::Unpin(std::span<const StoredKey> keys) {
  return impl_->SetPinned(keys, false);
}
StoreStats Store::Stats() const { return impl_->Stats(); }
Result<VerifyReport> Store::VerifyAll() { return impl_->VerifyAll(); }

// ------------------------------------------------------------------ Impl: open/close

Store::Impl::Impl(const StoreOptions& o)
    : opts_(o),
      index_(o.index_budget_bytes, o.eviction, o.eviction_samples, o.lfu_decay_accesses,
             o.seed, !o.redis.endpoints.empty()),
      max_entries_(index_.max_entries()) {
  on_[Tier::kMemory] = o.memory_budget_bytes > 0;
  on_[Tier::kDisk] = !o.path.empty();
  on_[Tier::kRemote] = !o.redis.endpoints.empty();
  budget_[Tier::kMemory] = o.memory_budget_bytes;
  budget_[Tier::kDisk] = on_[Tier::kDisk] ? o.disk_budget_bytes : 0;
  budget_[Tier::kRemote] = on_[Tier::kRemote] ? o.remote_budget_bytes : 0;
}

Status Store::Impl::Init() {
  if (!on_[Tier::kMemory] && !on_[Tier::kDisk]) {
    return Status::InvalidArgument("store options: T0 (memory_budget_bytes) or T1 (path) "
                                   "must be on");
  }
  if ((on_[Tier::kDisk] && budget_[Tier::kDisk] == 0) || (on_[Tier::kRemote] && budget_[Tier::kRemote] == 0)) {
    return Status::InvalidArgument("store options: a tier that is on has a byte budget of 0");
  }
  if (max_entries_ == 0) {
    return Status::InvalidArgument(
        "store options: index_budget_bytes " + std::to_string(opts_.index_budget_bytes) +
        " below the minimum " + std::to_string(PrefixIndex::MaxBytesForEntries(1)));
  }
  if (on_[Tier::kRemote]) {
    KVSTASH_ASSIGN_OR_RETURN(t2_, RedisTier::Open(opts_.redis));
  }
  if (on_[Tier::kDisk]) {
    RocksTierOptions ro;
    ro.path = opts_.path;
    ro.blob_min_bytes = opts_.blob_min_bytes;
    ro.sync_writes = opts_.sync_writes;
    ro.block_cache_bytes = opts_.block_cache_bytes;
    ro.env = opts_.rocksdb_env;
    KVSTASH_ASSIGN_OR_RETURN(t1_, RocksTier::Open(ro));
    if (t1_->read_only()) {
      // Serve what is stored; every Put fails until a restart that can write.
      KVSTASH_LOG_WARN("store: T1 opened read-only (reads served, Puts fail): {}",
                       t1_->CheckWritable().message());
      t1_write_failed_ = true;
    }
    KVSTASH_RETURN_IF_ERROR(LoadIndex());
    if (on_[Tier::kRemote] && !t1_->read_only()) {
      // Reopened with a smaller remote_budget_bytes: back within it before serving.
      MutexLock wl(write_mu_);
      bool over;
      {
        ReaderLock lock(index_mu_);
        over = bytes_[Tier::kRemote] > budget_[Tier::kRemote];
      }
      if (over) (void)EvictUntil(Tier::kRemote, budget_[Tier::kRemote], {});  // best effort
    }
  }
  return Status::Ok();
}

Status Store::Impl::LoadIndex() {
  struct Row {
    StoredKey key;
    MetaRecord meta;
  };
  std::vector<Row> rows;
  std::vector<StoredKey> drop;
  Status version_error;
  uint64_t skipped = 0;
  KVSTASH_RETURN_IF_ERROR(t1_->ScanMeta(
      [&](const StoredKey& key, std::string_view bytes) {
        auto m = DecodeMetaRecord({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
        if (m.ok()) {
          rows.push_back({key, *m});
        } else if (m.status().IsMismatch()) {
          version_error = m.status();
        } else {
          drop.push_back(key);
          c_.checksum_failures++;
        }
      },
      &skipped));
  if (!version_error.ok()) return version_error.WithContext("opening " + opts_.path);

  std::unordered_map<StoredKey, size_t, StoredKeyHash> by_key;
  by_key.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) by_key.emplace(rows[i].key, i);
  enum : uint8_t { kTodo, kOnPath, kIn, kOut };
  std::vector<uint8_t> state(rows.size(), kTodo);
  std::vector<uint32_t> ids(rows.size(), kNoEntry);
  std::vector<size_t> path;
  WriterLock lock(index_mu_);
  for (size_t r = 0; r < rows.size(); ++r) {
    // Walk up to an ancestor already decided, a root or a missing parent; then decide
    // root-first. An entry is kept only when its parent was kept (orphans and parent
    // cycles, which only corrupt data can make, are dropped).
    path.clear();
    for (size_t cur = r; state[cur] == kTodo;) {
      state[cur] = kOnPath;
      path.push_back(cur);
      if (!(rows[cur].meta.flags & kMetaHasParent)) break;
      auto it = by_key.find(rows[cur].meta.parent);
      if (it == by_key.end()) break;
      cur = it->second;
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const Row& row = rows[*it];
      const MetaRecord& m = row.meta;
      uint32_t parent = kNoEntry;
      bool keep = true;
      if (m.flags & kMetaHasParent) {
        auto p = by_key.find(m.parent);
        keep = p != by_key.end() && state[p->second] == kIn;
        if (keep) parent = ids[p->second];
      }
      keep = keep && ((m.tiers & kMetaInT1) || ((m.tiers & kMetaInT2) && on_[Tier::kRemote])) &&
             index_.size() < max_entries_;
      if (!keep) {
        state[*it] = kOut;
        drop.push_back(row.key);
        continue;
      }
      const uint32_t id = index_.Insert(row.key, parent, 0);
      DescribeEntry(m, &index_.at(id));
      uint8_t flags = 0;
      if (m.tiers & kMetaInT1) flags |= kInT1;
      if ((m.tiers & kMetaInT2) && on_[Tier::kRemote]) flags |= kInT2;
      if (m.flags & kMetaPinned) flags |= kPinned;
      if (m.flags & kMetaHasState) flags |= kHasState;
      if (m.flags & kMetaPartial) flags |= kPartial;
      SetFlagsLocked(id, flags);
      ids[*it] = id;
      state[*it] = kIn;
    }
  }
  lock.Unlock();
  if (!drop.empty() && t1_->read_only()) {
    // Not indexed, so never served; deleted at the next read-write open.
    KVSTASH_LOG_WARN("store: {} unreadable, orphaned or over-budget chunk records left on "
                     "the read-only disk", drop.size());
  } else if (!drop.empty()) {
    KVSTASH_LOG_WARN("store: dropping {} unreadable, orphaned or over-budget chunk records "
                     "at open", drop.size());
    RocksTier::Batch b = t1_->NewBatch();
    for (const StoredKey& k : drop) b.DeleteChunk(k);
    KVSTASH_RETURN_IF_ERROR(t1_->Write(b));
  }
  return Status::Ok();
}

Store::Impl::~Impl() {
  // Read-only, or a WAL that takes no writes: access statistics are not persisted.
  if (!t1_ || t1_->read_only() || t1_->needs_restart()) return;
  // Persist access statistics of entries hit since they were written, then flush.
  MutexLock wl(write_mu_);
  RocksTier::Batch b = t1_->NewBatch();
  {
    ReaderLock lock(index_mu_);
    index_.ForEach([&](uint32_t id) KVSTASH_REQUIRES_SHARED(index_mu_) {
      const IndexEntry& e = index_.at(id);
      if (e.hits != 0 && (e.flags & (kInT1 | kInT2))) b.PutMeta(e.key, EncodeMetaRecord(MetaOf(id)));
    });
  }
  if (b.count() > 0) {
    Status s = t1_->Write(b);
    if (!s.ok()) KVSTASH_LOG_WARN("store: access statistics not persisted: {}", s.ToString());
  }
  // A clean close leaves no WAL to replay at the next open.
  Status s = t1_->Flush();
  if (!s.ok()) KVSTASH_LOG_WARN("store: flush at close failed: {}", s.ToString());
}

// ------------------------------------------------------------------ Impl: index

void Store::Impl::SetFlagsLocked(uint32_t id, uint8_t flags) {
  IndexEntry& e = index_.at(id);
  const uint8_t old = e.live() ? e.flags : 0;
  for (Tier t : kTiers) {
    const uint8_t bit = TierBit(SlotOf(t));
    if ((old & bit) == (flags & bit)) continue;
    if (flags & bit) {
      bytes_[t] += e.bytes();
      ++entries_[t];
    } else {
      bytes_[t] -= e.bytes();
      --entries_[t];
    }
  }
  if ((old & kPinned) != (flags & kPinned)) {
    if (flags & kPinned) ++pinned_; else --pinned_;
  }
  if (!(flags & kInT0)) e.t0.reset();
  index_.SetFlags(id, flags);
}

void Store::Impl::RemoveLocked(uint32_t id) {
  SetFlagsLocked(id, 0);
  index_.Remove(id);
}

MetaRecord Store::Impl::MetaOf(uint32_t id) const {
  const IndexEntry& e = index_.at(id);
  MetaRecord m;
  if (e.flags & kPartial) m.flags |= kMetaPartial;
  if (e.flags & kHasState) m.flags |= kMetaHasState;
  if (e.flags & kPinned) m.flags |= kMetaPinned;
  if (e.parent != kNoEntry) {
    m.flags |= kMetaHasParent;
    m.parent = index_.at(e.parent).key;
  }
  if (e.flags & kInT1) m.tiers |= kMetaInT1;
  if (e.flags & kInT2) m.tiers |= kMetaInT2;
  m.codec = e.codec;
  m.tokens = e.tokens;
  m.payload_bytes = e.payload_bytes;
  m.payload_checksum = e.payload_checksum;
  m.state_bytes = e.state_bytes;
  m.state_checksum = e.state_checksum;
  m.created_ms = e.created_ms;
  m.last_access_ms = uint64_t{e.access_s} * 1000;
  m.hits = e.hits;
  return m;
}

// ------------------------------------------------------------------ Impl: Lookup, Stats

Result<LookupResult> Store::Impl::Lookup(std::span<const StoredKey> keys, bool require_state) {
  LookupResult r;
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> has_state;
  {
    ReaderLock lock(index_mu_);
    for (const StoredKey& k : keys) {
      const uint32_t id = index_.Find(k);
      if (id == kNoEntry) break;
      const IndexEntry& e = index_.at(id);
      r.keys.push_back(k);
      r.tiers.push_back((e.flags & kInT0) ? Tier::kMemory
                        : (e.flags & kInT1) ? Tier::kDisk : Tier::kRemote);
      tokens.push_back(e.tokens);
      has_state.push_back((e.flags & kHasState) != 0);
    }
  }
  if (t2_ && opts_.redis.lookup_remote && r.keys.size() < keys.size()) {
    auto rest = keys.subspan(r.keys.size());
    auto metas = t2_->GetMeta(rest);
    for (size_t i = 0; i < rest.size(); ++i) {
      if (!metas[i].ok()) {
        c_.errors[Tier::kRemote]++;
        break;
      }
      if (!metas[i]->has_value()) break;
      const MetaRecord& m = **metas[i];
      r.keys.push_back(rest[i]);
      r.tiers.push_back(Tier::kRemote);
      tokens.push_back(m.tokens);
      has_state.push_back((m.flags & kMetaHasState) != 0);
    }
  }
  if (require_state) {
    size_t keep = r.keys.size();
    while (keep > 0 && !has_state[keep - 1]) --keep;
    r.keys.resize(keep);
    r.tiers.resize(keep);
  }
  for (size_t i = 0; i < r.keys.size(); ++i) r.matched_tokens += tokens[i];
  c_.lookups++;
  c_.lookup_chunks += keys.size();
  c_.lookup_hit_chunks += r.keys.size();
  c_.lookup_hit_tokens += r.matched_tokens;
  return r;
}

StoreStats Store::Impl::Stats() const {
  StoreStats s;
  s.t2_up = !t2_ || t2_->up();
  s.t1_writes_failing = t1_ && t1_write_failed_.load();
  s.t1_read_only = t1_ && t1_->read_only();
  s.t1_read_only_filesystem = t1_ && t1_->read_only_filesystem();
  s.t1_needs_restart = t1_ && t1_->needs_restart();
  if (t1_) {
    s.t1_disk_free_bytes = t1_->FreeBytes();
    s.t1_free_bytes_needed = t1_->FreeBytesNeeded();
  }
  {
    ReaderLock lock(index_mu_);
    for (Tier t : kTiers) {
      s.tiers[SlotOf(t)].entries = entries_[t];
      s.tiers[SlotOf(t)].bytes = bytes_[t];
    }
    s.index_entries = index_.size();
    s.index_bytes = index_.MemoryBytes();
    s.pinned_entries = pinned_;
  }
  for (Tier t : kTiers) {
    TierStats& ts = s.tiers[SlotOf(t)];
    s.enabled[SlotOf(t)] = on_[t];
    ts.budget_bytes = budget_[t];
    ts.hits = c_.hits[t];
    ts.evictions = c_.evictions[t];
    ts.promotions = c_.promotions[t];
    ts.errors = c_.errors[t];
  }
  s.index_budget_bytes = opts_.index_budget_bytes;
  s.lookups = c_.lookups;
  s.lookup_chunks = c_.lookup_chunks;
  s.lookup_hit_chunks = c_.lookup_hit_chunks;
  s.lookup_hit_tokens = c_.lookup_hit_tokens;
  s.gets = c_.gets;
  s.get_misses = c_.get_misses;
  s.puts = c_.puts;
  s.put_bytes = c_.put_bytes;
  s.put_failures = c_.put_failures;
  s.deletes = c_.deletes;
  s.checksum_failures = c_.checksum_failures;
  s.index_evictions = c_.index_evictions;
  return s;
}

}  // namespace kvstash::store
