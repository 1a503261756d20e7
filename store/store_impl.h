// Store::Impl: the orchestration behind store/store.h (private to store/).
//
// Locking (see store.h "Thread-safety"):
// - write_mu_ serialises every operation that changes what is stored: Put, Delete,
//   Pin/Unpin, evictions, demotions, promotions and drops. While it is held nothing
//   else changes residency, so a writer can read the index, do I/O without the index
//   lock, and then apply the result.
// - index_mu_ (shared) guards the PrefixIndex and the per-tier accounting; readers
//   (Lookup, Get's planning) take it shared, writers take it exclusively and briefly,
//   never across I/O. Lock order: write_mu_ before index_mu_.
// The annotations (common/thread_annotations.h) let clang check both rules.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "common/thread_annotations.h"
#include "store/meta_record.h"
#include "store/prefix_index.h"
#include "store/redis_tier.h"
#include "store/rocks_tier.h"
#include "store/store.h"

namespace kvstash::store {

class Store::Impl {
 public:
  explicit Impl(const StoreOptions& options);
  ~Impl();
  // Opens the tiers and rebuilds the index from T1.
  Status Init();

  Result<LookupResult> Lookup(std::span<const StoredKey> keys, bool hybrid);
  Status Put(std::span<const ChunkPut> chunks);
  Result<std::vector<ChunkData>> Get(std::span<const StoredKey> keys);
  Result<uint64_t> Delete(std::span<const StoredKey> keys);
  Result<uint64_t> SetPinned(std::span<const StoredKey> keys, bool pinned);
  StoreStats Stats() const;
  Result<VerifyReport> VerifyAll();

 private:
  struct Counters {
    std::atomic<uint64_t> lookups{0}, lookup_chunks{0}, lookup_hit_chunks{0},
        lookup_hit_tokens{0}, gets{0}, get_misses{0}, puts{0}, put_bytes{0}, put_failures{0},
        deletes{0}, checksum_failures{0}, index_evictions{0};
    std::atomic<uint64_t> hits[kNumTiers]{}, evictions[kNumTiers]{}, promotions[kNumTiers]{},
        errors[kNumTiers]{};
  };

  // --- index bookkeeping; REQUIRES index_mu_ held exclusively.
  // Sets an entry's flags and keeps bytes_/entries_/pinned_ in step.
  void SetFlagsLocked(uint32_t id, uint8_t flags) KVSTASH_REQUIRES(index_mu_);
  // Removes a childless entry and its accounting.
  void RemoveLocked(uint32_t id) KVSTASH_REQUIRES(index_mu_);
  // The meta record describing entry `id` now (REQUIRES index_mu_ held, any mode).
  MetaRecord MetaOf(uint32_t id) const KVSTASH_REQUIRES_SHARED(index_mu_);

  // --- writers; REQUIRES write_mu_ held, index_mu_ not held.
  // After a failed T1 write (t1_write_failed_), asks RocksDB to resume (a full disk with
  // space again); clears the flag when it did. Called first by Put, Delete and Pin.
  void ResumeT1AfterFailedWrite() KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Evicts from tier `slot` until its bytes are <= target. kAnySlot: until the index has
  // <= target entries. A demotion to T2 first evicts from T2 (EvictUntil(2, ...), same
  // `protect`) so that T2 stays within remote_budget_bytes. Errors: ResourceExhausted
  // when no candidate is left outside `protect` (sorted ids); the failed eviction's own
  // error (IOError from a T1 write, e.g. a full disk), prefixed "eviction from <tier>".
  Status EvictUntil(int slot, uint64_t target, const std::vector<uint32_t>& protect)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  Status EvictOne(int slot, uint32_t id, const std::vector<uint32_t>& protect)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Removes the entries of `roots` and all descendants from every tier; returns the
  // number removed. Errors: IOError from T1 (nothing removed then).
  Result<uint64_t> RemoveSubtrees(const std::vector<uint32_t>& roots)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Drops the entries with these keys (checksum failure, vanished remote copy).
  // REQUIRES: write_mu_ NOT held (takes it).
  void DropKeys(const std::vector<StoredKey>& keys) KVSTASH_EXCLUDES(write_mu_, index_mu_);
  // Promotion of Get hits (T1 -> T0, T2 -> T1 and T0).
  void PromoteToMemory(uint32_t id, const SharedBytes& payload, const SharedBytes& state)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  void PromoteFromRemote(const RedisTier::Item& item)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Reads an entry's bytes from T0 or T1 for a demotion (nullopt: not readable).
  Result<RedisTier::Item> ReadForDemotion(uint32_t id)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);

  Status LoadIndex() KVSTASH_EXCLUDES(index_mu_);
  Status PutChunks(std::span<const ChunkPut> chunks) KVSTASH_EXCLUDES(write_mu_, index_mu_);

  StoreOptions opts_;
  bool on_[kNumTiers] = {};
  std::unique_ptr<RocksTier> t1_;
  std::unique_ptr<RedisTier> t2_;

  Mutex write_mu_ KVSTASH_ACQUIRED_BEFORE(index_mu_);
  mutable SharedMutex index_mu_;
  PrefixIndex index_ KVSTASH_GUARDED_BY(index_mu_);
  const uint64_t max_entries_;  // index_.max_entries(), fixed at construction
  uint64_t bytes_[kNumTiers] KVSTASH_GUARDED_BY(index_mu_) = {};
  uint64_t entries_[kNumTiers] KVSTASH_GUARDED_BY(index_mu_) = {};
  uint64_t pinned_ KVSTASH_GUARDED_BY(index_mu_) = 0;
  uint64_t budget_[kNumTiers] = {};
  // Set by a failed T1 write (disk full, I/O error), cleared when RocksDB resumes (the
  // next Put, Delete or Pin asks: ResumeT1AfterFailedWrite); atomic so that Stats()
  // reads it without write_mu_.
  std::atomic<bool> t1_write_failed_{false};
  Counters c_;
};

// The ResourceExhausted a Put gets when the index has no evictable entry left.
inline Status IndexBudgetFull() {
  return Status::ResourceExhausted("the index budget is full of pinned or in-use entries");
}

// Unix time now.
uint64_t NowMs();

}  // namespace kvstash::store
