// Store::Impl writers: Put, Delete, Pin/Unpin (store/store.h).
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "common/checksum.h"
#include "common/logging.h"
#include "store/store_impl.h"

namespace kvstash::store {
namespace {

SharedBytes CopyBytes(std::span<const uint8_t> b) {
  if (b.empty()) return nullptr;
  return std::make_shared<const std::string>(reinterpret_cast<const char*>(b.data()), b.size());
}

Status ValidateChunk(const PutChunk& c, size_t i) {
  const std::string where = "Put chunk " + std::to_string(i) + ": ";
  if (c.payload.empty()) return Status::InvalidArgument(where + "empty payload");
  if (c.payload.size() > kMaxValueBytes || c.state.size() > kMaxValueBytes) {
    return Status::InvalidArgument(where + "payload or state above " +
                                   std::to_string(kMaxValueBytes) + " bytes");
  }
  if (c.tokens == 0 || c.tokens > kMaxChunkTokens) {
    return Status::InvalidArgument(where + "tokens " + std::to_string(c.tokens) + " outside 1.." +
                                   std::to_string(kMaxChunkTokens));
  }
  if (c.has_parent && c.parent == c.key) {
    return Status::InvalidArgument(where + "chunk names itself as parent");
  }
  return Status::Ok();
}

// Checks every chunk and fills the input half of the plan (checksums outside every lock).
// Errors: InvalidArgument (ValidateChunk's, or a key twice in one Put).
Status ValidatePut(std::span<const PutChunk> chunks, PutPlan* plan) {
  const size_t n = chunks.size();
  plan->chunks = chunks;
  plan->position.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    KVSTASH_RETURN_IF_ERROR(ValidateChunk(chunks[i], i));
    if (!plan->position.emplace(chunks[i].key, i).second) {
      return Status::InvalidArgument("Put chunk " + std::to_string(i) + ": duplicate key " +
                                     ToHex(chunks[i].key));
    }
    plan->add_bytes += chunks[i].payload.size() + chunks[i].state.size();
  }
  plan->payload_checksum.resize(n);
  plan->state_checksum.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    plan->payload_checksum[i] = Xxh3_64(chunks[i].payload);
    if (!chunks[i].state.empty()) plan->state_checksum[i] = Xxh3_64(chunks[i].state);
  }
  plan->now_ms = NowMs();
  return Status::Ok();
}

// The meta record of chunk i of a Put as written: in T1 only, created and accessed now.
MetaRecord PutMetaRecord(const PutPlan& plan, size_t i) {
  const PutChunk& c = plan.chunks[i];
  MetaRecord m;
  m.flags = static_cast<uint16_t>((c.partial ? kMetaPartial : 0) | (c.state.empty() ? 0 : kMetaHasState) |
                                  (c.has_parent ? kMetaHasParent : 0));
  m.codec = c.codec;
  m.tiers = kMetaInT1;
  m.tokens = c.tokens;
  m.parent = c.has_parent ? c.parent : StoredKey{};
  m.payload_bytes = c.payload.size();
  m.payload_checksum = plan.payload_checksum[i];
  m.state_bytes = c.state.size();
  m.state_checksum = plan.state_checksum[i];
  m.created_ms = plan.now_ms;
  m.last_access_ms = plan.now_ms;
  return m;
}

}  // namespace

void Store::Impl::ResumeT1AfterFailedWrite() {
  if (!t1_ || !t1_write_failed_) return;
  // Busy while RocksDB's own background recovery runs; the caller's write then fails
  // with the background error until it completes.
  if (t1_->Resume().ok()) {
    KVSTASH_LOG_INFO("store: RocksDB resumed after a failed write");
    t1_write_failed_ = false;
  }
}

Status Store::Impl::Put(std::span<const PutChunk> chunks) {
  if (chunks.empty()) return Status::Ok();
  Status s = PutChunks(chunks);
  if (!s.ok()) c_.put_failures++;
  return s;
}

Status Store::Impl::WriteT1(RocksTier::Batch& batch) {
  Status s = t1_->Write(batch);
  if (!s.ok()) {
    c_.errors[Tier::kDisk]++;
    t1_write_failed_ = true;
  }
  return s;
}

Status Store::Impl::PutChunks(std::span<const PutChunk> chunks) {
  PutPlan plan;
  KVSTASH_RETURN_IF_ERROR(ValidatePut(chunks, &plan));
  // A read-only T1 takes no Put: fail before evicting anything (as Delete and Pin do).
  if (t1_) KVSTASH_RETURN_IF_ERROR(t1_->CheckWritable());
  plan.durable = t1_ ? Tier::kDisk : Tier::kMemory;
  MutexLock wl(write_mu_);
  ResumeT1AfterFailedWrite();
  KVSTASH_RETURN_IF_ERROR(ResolvePut(&plan));
  KVSTASH_RETURN_IF_ERROR(MakeRoomForPut(&plan));
  KVSTASH_RETURN_IF_ERROR(CommitPutToT1(plan));
  const bool to_t0 = MakeRoomInT0(plan);
  const StaleRemoteCopies stale = InstallPut(plan, to_t0);
  if (!stale.keys.empty()) DropStaleRemoteCopies(stale);
  c_.puts += chunks.size();
  c_.put_bytes += plan.add_bytes;
  return Status::Ok();
}

Status Store::Impl::ResolvePut(PutPlan* plan) {
  const size_t n = plan->chunks.size();
  ReaderLock lock(index_mu_);
  plan->existing.assign(n, kNoEntry);
  plan->parent_id.assign(n, kNoEntry);
  plan->parent_pos.assign(n, -1);
  plan->old_bytes = {};
  plan->protect.clear();
  plan->new_entries = 0;
  for (size_t i = 0; i < n; ++i) {
    const PutChunk& c = plan->chunks[i];
    const uint32_t id = index_.Find(c.key);
    plan->existing[i] = id;
    if (id != kNoEntry) {
      plan->protect.push_back(id);
      const IndexEntry& e = index_.at(id);
      // A chunk key has one parent: re-linking would make the index and T1's meta
      // disagree (and could close a cycle), so only an overwrite in place is allowed.
      const bool had_parent = e.parent != kNoEntry;
      if (had_parent != c.has_parent || (had_parent && index_.at(e.parent).key != c.parent)) {
        return Status::Mismatch(
            "Put chunk " + std::to_string(i) + ": key " + ToHex(c.key) +
            (had_parent ? " is stored with parent " + ToHex(index_.at(e.parent).key)
                        : std::string(" is stored as the first chunk of a prefix")) +
            ", this Put names " + (c.has_parent ? "parent " + ToHex(c.parent) : std::string("no parent")) +
            "; a chunk key has one parent (delete the key to re-link it)");
      }
      for (Tier t : kTiers) {
        if (e.flags & TierBit(SlotOf(t))) plan->old_bytes[t] += e.bytes();
      }
    } else {
      ++plan->new_entries;
    }
    if (!c.has_parent) continue;
    auto it = plan->position.find(c.parent);
    if (it != plan->position.end() && it->second < i) {
      plan->parent_pos[i] = static_cast<int64_t>(it->second);
      continue;
    }
    plan->parent_id[i] = index_.Find(c.parent);
    if (plan->parent_id[i] == kNoEntry) {
      return Status::NotFound("Put chunk " + std::to_string(i) + ": parent " + ToHex(c.parent) +
                              " is not stored; put the chain from its first missing chunk");
    }
    plan->protect.push_back(plan->parent_id[i]);
  }
  std::sort(plan->protect.begin(), plan->protect.end());
  return Status::Ok();
}

Status Store::Impl::MakeRoomForPut(PutPlan* plan) {
  const Tier durable = plan->durable;
  if (plan->add_bytes > budget_[durable]) {
    return Status::ResourceExhausted("Put of " + std::to_string(plan->add_bytes) + " bytes exceeds the " +
                                     TierName(durable) + " budget");
  }
  // A failed eviction (T1 write error: a full disk) fails the Put with its own error.
  KVSTASH_RETURN_IF_ERROR(
      EvictUntil(durable, budget_[durable] + plan->old_bytes[durable] - plan->add_bytes, plan->protect));
  if (plan->new_entries > max_entries_) return IndexBudgetFull();
  KVSTASH_RETURN_IF_ERROR(EvictEntriesUntil(max_entries_ - plan->new_entries, plan->protect));
  KVSTASH_RETURN_IF_ERROR(ResolvePut(plan));
  ReaderLock lock(index_mu_);
  if (index_.size() + plan->new_entries > max_entries_) return IndexBudgetFull();
  return Status::Ok();
}

Status Store::Impl::CommitPutToT1(const PutPlan& plan) {
  if (!t1_) return Status::Ok();
  const size_t n = plan.chunks.size();
  std::vector<MetaRecord> metas(n);
  {
    ReaderLock lock(index_mu_);
    for (size_t i = 0; i < n; ++i) {
      metas[i] = PutMetaRecord(plan, i);
      const uint32_t id = plan.existing[i];
      if (id == kNoEntry) continue;
      if (index_.at(id).flags & kPinned) metas[i].flags |= kMetaPinned;  // an overwrite keeps the pin
      // Redis holds an older version until DropStaleRemoteCopies: T1 keeps knowing of it
      // across a crash (so a later Delete removes it too).
      if (index_.at(id).flags & kInT2) metas[i].tiers |= kMetaInT2;
    }
  }
  RocksTier::Batch batch = t1_->NewBatch();
  for (size_t i = 0; i < n; ++i) {
    const PutChunk& c = plan.chunks[i];
    batch.PutChunk(c.key, EncodeMetaRecord(metas[i]), c.payload, c.state);
  }
  return WriteT1(batch);
}

bool Store::Impl::MakeRoomInT0(const PutPlan& plan) {
  if (!on_[Tier::kMemory]) return false;
  if (!t1_) return true;  // T0 is the durable tier: MakeRoomForPut made the room
  const uint64_t budget = budget_[Tier::kMemory];
  return plan.add_bytes <= budget &&
         EvictUntil(Tier::kMemory, budget + plan.old_bytes[Tier::kMemory] - plan.add_bytes, plan.protect).ok();
}

StaleRemoteCopies Store::Impl::InstallPut(const PutPlan& plan, bool to_t0) {
  StaleRemoteCopies stale;
  const size_t n = plan.chunks.size();
  std::vector<uint32_t> ids(n);
  WriterLock lock(index_mu_);
  for (size_t i = 0; i < n; ++i) {
    const PutChunk& c = plan.chunks[i];
    uint32_t id = plan.existing[i];
    bool stale_in_t2 = false;
    if (id == kNoEntry) {
      const uint32_t parent = plan.parent_pos[i] >= 0 ? ids[plan.parent_pos[i]] : plan.parent_id[i];
      id = index_.Insert(c.key, parent, 0);
    } else {
      stale_in_t2 = index_.at(id).flags & kInT2;
      if (stale_in_t2) {
        stale.keys.push_back(c.key);
        stale.ids.push_back(id);
      }
      // Leave every tier before the sizes change (keeps the accounting exact).
      SetFlagsLocked(id, index_.at(id).flags & kPinned);
    }
    ids[i] = id;
    IndexEntry& e = index_.at(id);
    DescribeEntry(PutMetaRecord(plan, i), &e);
    uint8_t flags = static_cast<uint8_t>((e.flags & kPinned) | (c.partial ? kPartial : 0) |
                                         (c.state.empty() ? 0 : kHasState) | (t1_ ? kInT1 : 0));
    if (to_t0) {
      auto rec = std::make_shared<MemoryRecord>();
      rec->payload = CopyBytes(c.payload);
      rec->state = CopyBytes(c.state);
      e.t0 = std::move(rec);
      flags |= kInT0;
    }
    // An overwritten entry that was in T2 stays flagged there ("Redis may hold a copy",
    // an older one) until DropStaleRemoteCopies deletes it; a demotion rewrites the copy
    // and a Get checks a T2 copy against the index's checksums.
    if (stale_in_t2) flags |= kInT2;
    SetFlagsLocked(id, flags);
  }
  return stale;
}

void Store::Impl::DropStaleRemoteCopies(const StaleRemoteCopies& stale) {
  std::vector<Status> deleted = t2_->Delete(stale.keys);
  WriterLock lock(index_mu_);
  for (size_t j = 0; j < stale.keys.size(); ++j) {
    if (!deleted[j].ok()) {
      c_.errors[Tier::kRemote]++;
      continue;
    }
    IndexEntry& e = index_.at(stale.ids[j]);
    if (e.live() && e.key == stale.keys[j] && (e.flags & (kInT0 | kInT1))) {
      SetFlagsLocked(stale.ids[j], e.flags & ~kInT2);
    }
  }
}

Result<uint64_t> Store::Impl::Delete(std::span<const StoredKey> keys) {
  // Refused whole on a read-only T1 (Redis copies must not go while T1 rows keep them).
  if (t1_) KVSTASH_RETURN_IF_ERROR(t1_->CheckWritable());
  MutexLock wl(write_mu_);
  ResumeT1AfterFailedWrite();
  std::vector<uint32_t> roots;
  {
    ReaderLock lock(index_mu_);
    for (const StoredKey& k : keys) {
      const uint32_t id = index_.Find(k);
      if (id != kNoEntry) roots.push_back(id);
    }
  }
  KVSTASH_ASSIGN_OR_RETURN(uint64_t removed, RemoveSubtrees(roots));
  c_.deletes += removed;
  return removed;
}

Result<uint64_t> Store::Impl::SetPinned(std::span<const StoredKey> keys, bool pinned) {
  if (t1_) KVSTASH_RETURN_IF_ERROR(t1_->CheckWritable());
  MutexLock wl(write_mu_);
  ResumeT1AfterFailedWrite();
  std::vector<uint32_t> ids;
  std::optional<RocksTier::Batch> batch;
  if (t1_) batch.emplace(t1_->NewBatch());
  {
    ReaderLock lock(index_mu_);
    for (const StoredKey& k : keys) {
      const uint32_t id = index_.Find(k);
      if (id == kNoEntry) continue;
      ids.push_back(id);
      const IndexEntry& e = index_.at(id);
      if (batch && (e.flags & (kInT1 | kInT2))) {
        MetaRecord m = MetaOf(id);
        m.flags = static_cast<uint16_t>(pinned ? (m.flags | kMetaPinned)
                                               : (m.flags & ~kMetaPinned));
        batch->PutMeta(k, EncodeMetaRecord(m));
      }
    }
  }
  if (batch && batch->count() > 0) KVSTASH_RETURN_IF_ERROR(WriteT1(*batch));
  WriterLock lock(index_mu_);
  for (uint32_t id : ids) {
    const uint8_t f = index_.at(id).flags;
    SetFlagsLocked(id, static_cast<uint8_t>(pinned ? (f | kPinned) : (f & ~kPinned)));
  }
  return static_cast<uint64_t>(ids.size());
}

}  // namespace kvstash::store
