// Store::Impl eviction, demotion, promotion and removal (store/store.h "Guarantees").
#include <algorithm>
#include <unordered_set>

#include "common/checksum.h"
#include "common/logging.h"
#include "store/store_impl.h"

namespace kvstash::store {

Status Store::Impl::EvictUntil(Tier tier, uint64_t target_bytes, const std::vector<uint32_t>& protect) {
  return EvictSlotUntil(SlotOf(tier), target_bytes, protect);
}

Status Store::Impl::EvictEntriesUntil(uint64_t max_entries, const std::vector<uint32_t>& protect) {
  return EvictSlotUntil(kAnySlot, max_entries, protect);
}

Status Store::Impl::EvictSlotUntil(int slot, uint64_t target, const std::vector<uint32_t>& protect) {
  auto excluded = [&](uint32_t id) {
    return std::binary_search(protect.begin(), protect.end(), id);
  };
  const std::string what = slot == kAnySlot ? "the index budget" : TierName(TierOfSlot(slot));
  for (;;) {
    uint32_t victim;
    {
      WriterLock lock(index_mu_);  // PickVictim advances the sampler
      const uint64_t current = slot == kAnySlot ? index_.size() : bytes_[TierOfSlot(slot)];
      if (current <= target) return Status::Ok();
      victim = index_.PickVictim(slot, excluded);
    }
    if (victim == kNoEntry) {
      return slot == kAnySlot ? IndexBudgetFull()
                              : Status::ResourceExhausted(what + " is full of pinned or in-use entries");
    }
    Status s = EvictOne(slot, victim, protect);
    if (!s.ok()) {
      KVSTASH_LOG_WARN("store: eviction from {} failed: {}", what, s.ToString());
      return Status::FromCode(static_cast<uint8_t>(s.code()),
                              "eviction from " + what + " failed: " + s.message());
    }
  }
}

Result<RedisTier::Item> Store::Impl::ReadForDemotion(uint32_t id) {
  RedisTier::Item item;
  uint8_t flags;
  {
    ReaderLock lock(index_mu_);
    const IndexEntry& e = index_.at(id);
    item.key = e.key;
    item.meta = MetaOf(id);
    flags = e.flags;
    if (e.t0) {
      item.payload = e.t0->payload;
      item.state = e.t0->state;
    }
  }
  if (!item.payload && t1_ && (flags & kInT1)) {
    const StoredKey key = item.key;
    KVSTASH_ASSIGN_OR_RETURN(auto values, t1_->Read(std::span(&key, 1)));
    if (values[0].corrupt) return Status::Corruption("RocksDB reports corruption");
    if (!values[0].found) return Status::NotFound("chunk vanished from T1");
    item.payload = std::make_shared<const std::string>(std::move(values[0].payload));
    if (!values[0].state.empty()) {
      item.state = std::make_shared<const std::string>(std::move(values[0].state));
    }
  }
  if (!item.payload) return Status::NotFound("chunk has no readable copy");
  if (!Matches(item.payload, item.meta.payload_bytes, item.meta.payload_checksum) ||
      ((item.meta.flags & kMetaHasState) &&
       !Matches(item.state, item.meta.state_bytes, item.meta.state_checksum))) {
    c_.checksum_failures++;
    return Status::Corruption("chunk fails its checksum while being demoted");
  }
  if (!(item.meta.flags & kMetaHasState)) item.state.reset();
  item.meta.tiers = kMetaInT2;
  return item;
}

Status Store::Impl::EvictOne(int slot, uint32_t id, const std::vector<uint32_t>& protect) {
  uint8_t flags;
  MetaRecord meta;
  StoredKey key;
  {
    ReaderLock lock(index_mu_);
    flags = index_.at(id).flags;
    key = index_.at(id).key;
    meta = MetaOf(id);
  }
  auto remove = [&]() KVSTASH_REQUIRES(write_mu_) -> Status {
    KVSTASH_ASSIGN_OR_RETURN(uint64_t removed, RemoveSubtrees({id}));
    (void)removed;
    if (slot == kAnySlot) c_.index_evictions++; else c_.evictions[TierOfSlot(slot)]++;
    return Status::Ok();
  };
  // Copies the entry to T2 after making room there (remote_budget_bytes: T2 evicts
  // its own victims first, never the entries the caller protects); false when the
  // entry does not fit or the copy failed.
  // The copy is written even when the entry is flagged in T2 already: that flag on an
  // entry with a local copy means "Redis may hold a copy" (possibly an older version,
  // see Put), so only a fresh write makes the Redis copy the current one.
  auto demote = [&]() KVSTASH_REQUIRES(write_mu_) -> bool {
    const uint64_t bytes = meta.payload_bytes + meta.state_bytes;
    const uint64_t counted = (flags & kInT2) ? bytes : 0;  // already in bytes_[T2]
    std::vector<uint32_t> keep = protect;
    keep.insert(std::upper_bound(keep.begin(), keep.end(), id), id);
    const uint64_t budget = budget_[Tier::kRemote];
    if (bytes > budget || !EvictUntil(Tier::kRemote, budget - bytes + counted, keep).ok()) return false;
    auto item = ReadForDemotion(id);
    if (item.ok()) {
      const RedisTier::Item items[1] = {std::move(item).value()};
      if (t2_->Put(items)[0].ok()) return true;
    }
    c_.errors[Tier::kRemote]++;
    return false;
  };

  if (slot == SlotOf(Tier::kMemory)) {
    if (flags & kInT1) {  // T0 is a cache in front of T1: drop the memory copy
      WriterLock lock(index_mu_);
      SetFlagsLocked(id, flags & ~kInT0);
      c_.evictions[Tier::kMemory]++;
      return Status::Ok();
    }
    if (t2_ && demote()) {
      WriterLock lock(index_mu_);
      SetFlagsLocked(id, (flags & ~kInT0) | kInT2);
      c_.evictions[Tier::kMemory]++;
      return Status::Ok();
    }
    return remove();
  }
  if (slot == SlotOf(Tier::kDisk)) {
    if (!t2_) return remove();
    if (!(flags & kInT2)) {
      // Crash safety: T1's meta says "Redis may hold a copy" before the copy is
      // written, so that after a kill -9 between the two the node still knows of the
      // copy (a Delete then removes it; it is never an orphan that resurrects).
      meta.tiers = kMetaInT1 | kMetaInT2;
      RocksTier::Batch pre = t1_->NewBatch();
      pre.PutMeta(key, EncodeMetaRecord(meta));
      KVSTASH_RETURN_IF_ERROR(WriteT1(pre));
    }
    if (!demote()) return remove();
    {
      WriterLock lock(index_mu_);
      flags = index_.at(id).flags | kInT2;
      SetFlagsLocked(id, flags);
    }
    meta.tiers = kMetaInT2;
    RocksTier::Batch b = t1_->NewBatch();
    b.PutMeta(key, EncodeMetaRecord(meta));
    b.DeleteValues(key);
    KVSTASH_RETURN_IF_ERROR(WriteT1(b));
    WriterLock lock(index_mu_);
    SetFlagsLocked(id, flags & ~(kInT0 | kInT1));
    c_.evictions[Tier::kDisk]++;
    return Status::Ok();
  }
  if (slot == SlotOf(Tier::kRemote)) {
    if (!(flags & (kInT0 | kInT1))) return remove();
    const StoredKey keys[1] = {key};
    if (!t2_->Delete(keys)[0].ok()) c_.errors[Tier::kRemote]++;
    if (t1_ && (flags & kInT1)) {
      meta.tiers = kMetaInT1;
      RocksTier::Batch b = t1_->NewBatch();
      b.PutMeta(key, EncodeMetaRecord(meta));
      KVSTASH_RETURN_IF_ERROR(WriteT1(b));
    }
    WriterLock lock(index_mu_);
    SetFlagsLocked(id, flags & ~kInT2);
    c_.evictions[Tier::kRemote]++;
    return Status::Ok();
  }
  return remove();  // kAnySlot: the whole entry
}

Result<uint64_t> Store::Impl::RemoveSubtrees(const std::vector<uint32_t>& roots) {
  std::vector<uint32_t> order;
  std::vector<StoredKey> t1_keys, t2_keys;
  {
    ReaderLock lock(index_mu_);
    std::unordered_set<uint32_t> seen;
    for (uint32_t root : roots) {
      if (seen.count(root) || !index_.at(root).live()) continue;
      for (uint32_t id : index_.SubtreePostOrder(root)) {
        if (!seen.insert(id).second) continue;
        order.push_back(id);
        const IndexEntry& e = index_.at(id);
        if (t1_ && (e.flags & (kInT1 | kInT2))) t1_keys.push_back(e.key);
        if (t2_ && (e.flags & kInT2)) t2_keys.push_back(e.key);
      }
    }
  }
  // Redis first: a kill -9 between the two leaves T1 rows whose Redis copy is gone
  // (a miss after the restart, as a Delete cut off may be), never Redis copies that
  // no T1 row tracks (orphans a later Get or Lookup would resurrect).
  if (!t2_keys.empty()) {
    for (const Status& s : t2_->Delete(t2_keys)) {
      if (!s.ok()) c_.errors[Tier::kRemote]++;
    }
  }
  if (!t1_keys.empty()) {
    RocksTier::Batch b = t1_->NewBatch();
    for (const StoredKey& k : t1_keys) b.DeleteChunk(k);
    KVSTASH_RETURN_IF_ERROR(WriteT1(b));
  }
  WriterLock lock(index_mu_);
  for (uint32_t id : order) RemoveLocked(id);
  return static_cast<uint64_t>(order.size());
}

void Store::Impl::DropKeys(const std::vector<StoredKey>& keys) {
  MutexLock wl(write_mu_);
  std::vector<uint32_t> roots;
  {
    ReaderLock lock(index_mu_);
    for (const StoredKey& k : keys) {
      const uint32_t id = index_.Find(k);
      if (id != kNoEntry) roots.push_back(id);
    }
  }
  auto removed = RemoveSubtrees(roots);
  if (!removed.ok()) {
    KVSTASH_LOG_WARN("store: dropping {} bad chunks failed: {}", keys.size(),
                     removed.status().ToString());
  }
}

void Store::Impl::PromoteToMemory(uint32_t id, const SharedBytes& payload,
                                  const SharedBytes& state) {
  uint64_t bytes;
  StoredKey key;
  {
    ReaderLock lock(index_mu_);
    const IndexEntry& e = index_.at(id);
    if (!on_[Tier::kMemory] || !e.live() || (e.flags & kInT0)) return;
    bytes = e.bytes();
    key = e.key;
  }
  const uint64_t budget = budget_[Tier::kMemory];
  if (bytes > budget || !EvictUntil(Tier::kMemory, budget - bytes, {id}).ok()) return;
  WriterLock lock(index_mu_);
  IndexEntry& e = index_.at(id);
  if (!e.live() || e.key != key || (e.flags & kInT0)) return;
  auto rec = std::make_shared<MemoryRecord>();
  rec->payload = payload;
  rec->state = (e.flags & kHasState) ? state : nullptr;
  e.t0 = std::move(rec);
  SetFlagsLocked(id, e.flags | kInT0);
  c_.promotions[Tier::kMemory]++;
}

void Store::Impl::PromoteFromRemote(const RedisTier::Item& item) {
  // A read-only T1 (opened on a full disk) takes no copy and must not evict: the Get was
  // served from T2 and the entry stays there.
  if (t1_ && t1_->read_only()) return;
  const MetaRecord& m = item.meta;
  const uint64_t bytes = m.payload_bytes + m.state_bytes;
  uint32_t id, parent = kNoEntry;
  std::vector<uint32_t> protect;
  {
    ReaderLock lock(index_mu_);
    id = index_.Find(item.key);
    if (id == kNoEntry && (m.flags & kMetaHasParent)) {
      parent = index_.Find(m.parent);
      if (parent == kNoEntry) return;  // cannot link it into a chain here
    }
  }
  if (id != kNoEntry) protect.push_back(id);
  if (parent != kNoEntry) protect.push_back(parent);
  std::sort(protect.begin(), protect.end());
  if (id == kNoEntry && !EvictEntriesUntil(max_entries_ - 1, protect).ok()) return;
  const Tier durable = t1_ ? Tier::kDisk : Tier::kMemory;
  if (bytes > budget_[durable] || !EvictUntil(durable, budget_[durable] - bytes, protect).ok()) {
    return;
  }
  {
    // Evictions above never remove protected entries, but re-check before linking.
    ReaderLock lock(index_mu_);
    if (id != kNoEntry && (!index_.at(id).live() || index_.at(id).key != item.key)) return;
    if (parent != kNoEntry && (!index_.at(parent).live() || index_.at(parent).key != m.parent)) {
      return;
    }
  }
  if (t1_) {
    MetaRecord meta = m;
    meta.tiers = kMetaInT1 | kMetaInT2;
    meta.flags &= static_cast<uint16_t>(~kMetaPinned);
    if (id != kNoEntry) {
      // The entry keeps its local link (T1's meta must agree with the index).
      ReaderLock lock(index_mu_);
      const IndexEntry& e = index_.at(id);
      if (e.flags & kPinned) meta.flags |= kMetaPinned;
      meta.flags &= static_cast<uint16_t>(~kMetaHasParent);
      meta.parent = StoredKey{};
      if (e.parent != kNoEntry) {
        meta.flags |= kMetaHasParent;
        meta.parent = index_.at(e.parent).key;
      }
    }
    RocksTier::Batch b = t1_->NewBatch();
    auto as_span = [](const SharedBytes& s) {
      return s ? std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s->data()), s->size())
               : std::span<const uint8_t>();
    };
    b.PutChunk(item.key, EncodeMetaRecord(meta), as_span(item.payload), as_span(item.state));
    if (!WriteT1(b).ok()) return;
  }
  bool over_remote_budget;
  {
    WriterLock lock(index_mu_);
    if (id == kNoEntry) {
      id = index_.Insert(item.key, parent, 0);
      MetaRecord local = m;  // a new entry here: accessed now, no hits on this node yet
      local.last_access_ms = NowMs();
      local.hits = 0;
      DescribeEntry(local, &index_.at(id));
      uint8_t f = kInT2;
      if (m.flags & kMetaPartial) f |= kPartial;
      if (m.flags & kMetaHasState) f |= kHasState;
      SetFlagsLocked(id, f);
    }
    uint8_t flags = index_.at(id).flags | kInT2;
    if (t1_) {
      flags |= kInT1;
      c_.promotions[Tier::kDisk]++;
    }
    if (!t1_ && on_[Tier::kMemory] && !(flags & kInT0)) {
      // Without T1, T0 holds the promoted copy (room was made above).
      auto rec = std::make_shared<MemoryRecord>();
      rec->payload = item.payload;
      rec->state = item.state;
      index_.at(id).t0 = std::move(rec);
      flags |= kInT0;
      c_.promotions[Tier::kMemory]++;
    }
    SetFlagsLocked(id, flags);
    over_remote_budget = bytes_[Tier::kRemote] > budget_[Tier::kRemote];
  }
  // A chunk first seen in T2 now counts against this node's remote budget.
  if (over_remote_budget) (void)EvictUntil(Tier::kRemote, budget_[Tier::kRemote], {id});  // best effort
}

}  // namespace kvstash::store
