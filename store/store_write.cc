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

Status ValidateChunk(const ChunkPut& c, size_t i) {
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

Status Store::Impl::Put(std::span<const ChunkPut> chunks) {
  Status s = PutChunks(chunks);
  if (!s.ok()) c_.put_failures++;
  return s;
}

Status Store::Impl::PutChunks(std::span<const ChunkPut> chunks) {
  const size_t n = chunks.size();
  if (n == 0) return Status::Ok();
  std::unordered_map<StoredKey, size_t, StoredKeyHash> pos;
  pos.reserve(n);
  uint64_t add_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    KVSTASH_RETURN_IF_ERROR(ValidateChunk(chunks[i], i));
    if (!pos.emplace(chunks[i].key, i).second) {
      return Status::InvalidArgument("Put chunk " + std::to_string(i) + ": duplicate key " +
                                     ToHex(chunks[i].key));
    }
    add_bytes += chunks[i].payload.size() + chunks[i].state.size();
  }
  // Checksums outside every lock.
  std::vector<uint64_t> pck(n), sck(n, 0);
  for (size_t i = 0; i < n; ++i) {
    pck[i] = Xxh3_64(chunks[i].payload);
    if (!chunks[i].state.empty()) sck[i] = Xxh3_64(chunks[i].state);
  }
  const uint64_t now_ms = NowMs();
  const int durable = t1_ ? 1 : 0;  // the tier every Put must land in

  // A read-only T1 takes no Put: fail before evicting anything (as Delete and Pin do).
  if (t1_) KVSTASH_RETURN_IF_ERROR(t1_->CheckWritable());
  MutexLock wl(write_mu_);
  auto fail = [](Status s) { return s; };
  ResumeT1AfterFailedWrite();

  // Resolve existing entries and parents (again after evictions, which may have
  // removed some).
  std::vector<uint32_t> existing(n), parent_id(n);
  std::vector<int64_t> parent_pos(n);
  std::vector<uint32_t> protect;
  uint64_t old_bytes[kNumTiers];
  uint64_t new_entries = 0;
  auto resolve = [&]() -> Status {
    ReaderLock lock(index_mu_);
    std::fill(existing.begin(), existing.end(), kNoEntry);
    std::fill(parent_id.begin(), parent_id.end(), kNoEntry);
    std::fill(parent_pos.begin(), parent_pos.end(), -1);
    std::fill(std::begin(old_bytes), std::end(old_bytes), 0);
    protect.clear();
    new_entries = 0;
    for (size_t i = 0; i < n; ++i) {
      const ChunkPut& c = chunks[i];
      existing[i] = index_.Find(c.key);
      if (existing[i] != kNoEntry) {
        protect.push_back(existing[i]);
        const IndexEntry& e = index_.at(existing[i]);
        // A chunk key has one parent: re-linking would make the index and T1's meta
        // disagree (and could close a cycle), so only an overwrite in place is allowed.
        const bool had_parent = e.parent != kNoEntry;
        if (had_parent != c.has_parent ||
            (had_parent && index_.at(e.parent).key != c.parent)) {
          return Status::Mismatch(
              "Put chunk " + std::to_string(i) + ": key " + ToHex(c.key) +
              (had_parent ? " is stored with parent " + ToHex(index_.at(e.parent).key)
                          : std::string(" is stored as the first chunk of a prefix")) +
              ", this Put names " +
              (c.has_parent ? "parent " + ToHex(c.parent) : std::string("no parent")) +
              "; a chunk key has one parent (delete the key to re-link it)");
        }
        for (int t = 0; t < kNumTiers; ++t) {
          if (e.flags & TierBit(t)) old_bytes[t] += e.bytes();
        }
      } else {
        ++new_entries;
      }
      if (!c.has_parent) continue;
      auto it = pos.find(c.parent);
      if (it != pos.end() && it->second < i) {
        parent_pos[i] = static_cast<int64_t>(it->second);
        continue;
      }
      parent_id[i] = index_.Find(c.parent);
      if (parent_id[i] == kNoEntry) {
        return Status::NotFound("Put chunk " + std::to_string(i) + ": parent " +
                                ToHex(c.parent) +
                                " is not stored; put the chain from its first missing chunk");
      }
      protect.push_back(parent_id[i]);
    }
    std::sort(protect.begin(), protect.end());
    return Status::Ok();
  };
  if (Status s = resolve(); !s.ok()) return fail(s);

  // Room in the durable tier and in the index.
  if (add_bytes > budget_[durable]) {
    return fail(Status::ResourceExhausted("Put of " + std::to_string(add_bytes) +
                                          " bytes exceeds the " + TierName(Tier(durable)) +
                                          " budget"));
  }
  // A failed eviction (T1 write error: a full disk) fails the Put with its own error.
  if (Status s = EvictUntil(durable, budget_[durable] + old_bytes[durable] - add_bytes, protect);
      !s.ok()) {
    return fail(s);
  }
  if (new_entries > max_entries_) {
    return fail(IndexBudgetFull());
  }
  if (Status s = EvictUntil(kAnySlot, max_entries_ - new_entries, protect); !s.ok()) return fail(s);
  if (Status s = resolve(); !s.ok()) return fail(s);
  bool index_full;
  {
    ReaderLock lock(index_mu_);
    index_full = index_.size() + new_entries > max_entries_;
  }
  if (index_full) {
    return fail(IndexBudgetFull());
  }

  // Commit to T1: one WriteBatch, WAL on.
  std::vector<MetaRecord> metas(n);
  for (size_t i = 0; i < n; ++i) {
    const ChunkPut& c = chunks[i];
    MetaRecord& m = metas[i];
    m.flags = static_cast<uint16_t>((c.partial ? kMetaPartial : 0) |
                                    (c.state.empty() ? 0 : kMetaHasState) |
                                    (c.has_parent ? kMetaHasParent : 0));
    m.codec = c.codec;
    m.tiers = kMetaInT1;
    m.tokens = c.tokens;
    m.parent = c.has_parent ? c.parent : StoredKey{};
    m.payload_bytes = c.payload.size();
    m.payload_checksum = pck[i];
    m.state_bytes = c.state.size();
    m.state_checksum = sck[i];
    m.created_ms = now_ms;
    m.last_access_ms = now_ms;
  }
  if (t1_) {
    RocksTier::Batch batch = t1_->NewBatch();
    {
      ReaderLock lock(index_mu_);
      for (size_t i = 0; i < n; ++i) {
        if (existing[i] != kNoEntry && (index_.at(existing[i]).flags & kPinned)) {
          metas[i].flags |= kMetaPinned;  // an overwrite keeps the pin
        }
        if (existing[i] != kNoEntry && (index_.at(existing[i]).flags & kInT2)) {
          // Redis holds an older version until the Delete below: T1 keeps knowing of
          // it across a crash (so a later Delete removes it too).
          metas[i].tiers |= kMetaInT2;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      batch.PutChunk(chunks[i].key, EncodeMetaRecord(metas[i]), chunks[i].payload,
                     chunks[i].state);
    }
    Status s = t1_->Write(batch);
    if (!s.ok()) {
      t1_write_failed_ = true;
      c_.errors[1]++;
      return fail(s);
    }
  }

  // T0 copies: the only copy without T1; a cache in front of T1 otherwise (skipped
  // when T0 cannot make room).
  bool to_t0 = on_[0];
  if (to_t0 && t1_) {
    to_t0 = add_bytes <= budget_[0] &&
            EvictUntil(0, budget_[0] + old_bytes[0] - add_bytes, protect).ok();
  }

  std::vector<StoredKey> stale_remote;
  std::vector<uint32_t> stale_ids;
  {
    WriterLock lock(index_mu_);
    std::vector<uint32_t> ids(n);
    for (size_t i = 0; i < n; ++i) {
      const ChunkPut& c = chunks[i];
      uint32_t id = existing[i];
      if (id == kNoEntry) {
        const uint32_t parent = parent_pos[i] >= 0 ? ids[parent_pos[i]] : parent_id[i];
        id = index_.Insert(c.key, parent, 0);
      } else {
        if (index_.at(id).flags & kInT2) {
          stale_remote.push_back(c.key);
          stale_ids.push_back(id);
        }
        // Leave every tier before the sizes change (keeps the accounting exact).
        SetFlagsLocked(id, index_.at(id).flags & kPinned);
      }
      ids[i] = id;
      IndexEntry& e = index_.at(id);
      e.tokens = c.tokens;
      e.payload_bytes = static_cast<uint32_t>(c.payload.size());
      e.state_bytes = static_cast<uint32_t>(c.state.size());
      e.payload_checksum = pck[i];
      e.state_checksum = sck[i];
      e.codec = c.codec;
      e.created_ms = now_ms;
      e.access_s = static_cast<uint32_t>(now_ms / 1000);
      e.hits = 0;
      uint8_t flags = static_cast<uint8_t>((e.flags & kPinned) | (c.partial ? kPartial : 0) |
                                           (c.state.empty() ? 0 : kHasState) |
                                           (t1_ ? kInT1 : 0));
      if (to_t0) {
        auto rec = std::make_shared<MemoryRecord>();
        rec->payload = CopyBytes(c.payload);
        rec->state = CopyBytes(c.state);
        e.t0 = std::move(rec);
        flags |= kInT0;
      }
      // An overwritten entry that was in T2 stays flagged there ("Redis may hold a
      // copy", an older one) until that copy is deleted below; a demotion rewrites
      // the copy and a Get checks a T2 copy against the index's checksums.
      if (std::find(stale_ids.begin(), stale_ids.end(), id) != stale_ids.end()) flags |= kInT2;
      SetFlagsLocked(id, flags);
    }
  }
  if (!stale_remote.empty()) {
    // The Redis copies of overwritten entries are older versions: remove them.
    std::vector<Status> deleted = t2_->Delete(stale_remote);
    WriterLock lock(index_mu_);
    for (size_t j = 0; j < stale_remote.size(); ++j) {
      if (!deleted[j].ok()) {
        c_.errors[2]++;
        continue;
      }
      IndexEntry& e = index_.at(stale_ids[j]);
      if (e.live() && e.key == stale_remote[j] && (e.flags & (kInT0 | kInT1))) {
        SetFlagsLocked(stale_ids[j], e.flags & ~kInT2);
      }
    }
  }
  c_.puts += n;
  c_.put_bytes += add_bytes;
  return Status::Ok();
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
  if (batch && batch->count() > 0) {
    Status s = t1_->Write(*batch);
    if (!s.ok()) {
      c_.errors[1]++;
      t1_write_failed_ = true;
      return s;
    }
  }
  WriterLock lock(index_mu_);
  for (uint32_t id : ids) {
    const uint8_t f = index_.at(id).flags;
    SetFlagsLocked(id, static_cast<uint8_t>(pinned ? (f | kPinned) : (f & ~kPinned)));
  }
  return static_cast<uint64_t>(ids.size());
}

}  // namespace kvstash::store
