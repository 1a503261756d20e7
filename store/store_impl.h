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
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"
#include "store/meta_record.h"
#include "store/prefix_index.h"
#include "store/redis_tier.h"
#include "store/rocks_tier.h"
#include "store/store.h"

namespace kvstash::store {

// One value per tier, indexed by Tier (never by a bare 0, 1 or 2).
template <typename T>
class PerTier {
 public:
  T& operator[](Tier t) { return v_[static_cast<int>(t)]; }
  const T& operator[](Tier t) const { return v_[static_cast<int>(t)]; }

 private:
  T v_[kNumTiers] = {};
};

// The tiers in order T0, T1, T2, and the tier of an index slot (REQUIRES: slot < kNumTiers,
// i.e. not kAnySlot).
inline constexpr Tier kTiers[kNumTiers] = {Tier::kMemory, Tier::kDisk, Tier::kRemote};
constexpr Tier TierOfSlot(int slot) { return static_cast<Tier>(slot); }
constexpr int SlotOf(Tier t) { return static_cast<int>(t); }

// One Put as its phases see it (Store::Impl::PutChunks). ValidatePut fills the first
// group from the chunks alone; ResolvePut fills the second from the index, and runs
// again after evictions (which may have removed entries it found).
struct PutPlan {
  std::span<const PutChunk> chunks;
  std::unordered_map<StoredKey, size_t, StoredKeyHash> position;  // key -> index in chunks
  uint64_t add_bytes = 0;                 // payload + state bytes of all chunks
  std::vector<uint64_t> payload_checksum;  // XXH3-64 per chunk
  std::vector<uint64_t> state_checksum;    // XXH3-64 per chunk (0: no state)
  uint64_t now_ms = 0;
  Tier durable = Tier::kMemory;  // the tier every Put lands in: T1 when on, else T0

  std::vector<uint32_t> existing;      // index id of an overwritten chunk, or kNoEntry
  std::vector<uint32_t> parent_id;     // index id of a parent already stored, or kNoEntry
  std::vector<int64_t> parent_pos;     // position of a parent in this Put, or -1
  std::vector<uint32_t> protect;       // sorted ids no eviction may take
  PerTier<uint64_t> old_bytes;         // bytes the overwritten entries hold per tier
  uint64_t new_entries = 0;            // chunks not in the index yet
};

// The Redis copies an overwriting Put left behind (older versions), to delete.
struct StaleRemoteCopies {
  std::vector<StoredKey> keys;
  std::vector<uint32_t> ids;
};

// What Get planned for one key under the index lock (Store::Impl::PlanGet).
struct GetPlan {
  uint32_t id = kNoEntry;
  uint8_t flags = 0;
  uint64_t payload_bytes = 0, state_bytes = 0, payload_checksum = 0, state_checksum = 0;
  uint32_t tokens = 0;
  uint16_t codec = 0;
  std::shared_ptr<const MemoryRecord> t0;  // the T0 copy when resident there
};

// The state of one Get between its phases: the answers, and the keys each later tier
// must read or the store must drop.
struct GetState {
  std::span<const StoredKey> keys;
  std::vector<GetPlan> plan;
  std::vector<ChunkData> out;
  std::vector<size_t> want_t1, want_t2;  // positions in keys
  std::vector<StoredKey> drop;           // indexed entries that failed a checksum or vanished
  std::vector<StoredKey> drop_remote;    // unindexed Redis copies that failed a checksum
  std::vector<std::pair<size_t, RedisTier::Item>> from_remote;  // T2 hits to promote
  uint64_t corrupt = 0;
  // Marks position i as damaged: a miss flagged corrupt, its copy to be dropped.
  void Corrupt(size_t i);
};

class Store::Impl {
 public:
  explicit Impl(const StoreOptions& options);
  ~Impl();
  // Opens the tiers and rebuilds the index from T1.
  Status Init();

  Result<LookupResult> Lookup(std::span<const StoredKey> keys, bool require_state);
  Status Put(std::span<const PutChunk> chunks);
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
    PerTier<std::atomic<uint64_t>> hits, evictions, promotions, errors;
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
  // Evicts from `tier` until its bytes are <= target_bytes. A demotion to T2 first
  // evicts from T2 (same `protect`) so that T2 stays within remote_budget_bytes.
  // Errors: ResourceExhausted when no candidate is left outside `protect` (sorted ids);
  // the failed eviction's own error (IOError from a T1 write, e.g. a full disk),
  // prefixed "eviction from <tier>".
  Status EvictUntil(Tier tier, uint64_t target_bytes, const std::vector<uint32_t>& protect)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Removes whole entries until the index holds <= max_entries. Errors as EvictUntil
  // (IndexBudgetFull when nothing outside `protect` can go).
  Status EvictEntriesUntil(uint64_t max_entries, const std::vector<uint32_t>& protect)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Both of the above: index slot `slot` (a tier, or kAnySlot for whole entries).
  Status EvictSlotUntil(int slot, uint64_t target, const std::vector<uint32_t>& protect)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  Status EvictOne(int slot, uint32_t id, const std::vector<uint32_t>& protect)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Writes a batch to T1; a failure counts as a T1 error, sets t1_write_failed_ and is
  // returned as is.
  Status WriteT1(RocksTier::Batch& batch) KVSTASH_REQUIRES(write_mu_);
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

  // --- Put, in its phases (store_write.cc). PutChunks runs them in order:
  // ValidatePut (no lock), then under write_mu_: ResolvePut, MakeRoomForPut,
  // CommitPutToT1, MakeRoomInT0, InstallPut, DropStaleRemoteCopies.
  Status PutChunks(std::span<const PutChunk> chunks) KVSTASH_EXCLUDES(write_mu_, index_mu_);
  // Finds each chunk's overwritten entry and parent. Errors: Mismatch (a stored key
  // re-linked to another parent), NotFound (a parent neither stored nor in this Put).
  Status ResolvePut(PutPlan* plan) KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Evicts from the durable tier and the index until the Put fits, then resolves again.
  // Errors: ResourceExhausted (above the budget, or nothing evictable), an eviction's
  // IOError, or ResolvePut's.
  Status MakeRoomForPut(PutPlan* plan) KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // The chunks' meta records, payloads and states in one WAL-logged WriteBatch (no-op
  // without T1). Errors: the write's.
  Status CommitPutToT1(const PutPlan& plan) KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Whether the Put also gets T0 copies: always when T0 is the durable tier; otherwise
  // when T0 could make room (a cache in front of T1).
  bool MakeRoomInT0(const PutPlan& plan) KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Installs the chunks in the index (new entries, or overwritten ones in place).
  StaleRemoteCopies InstallPut(const PutPlan& plan, bool to_t0)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);
  // Deletes the older Redis copies of overwritten entries and clears their T2 flag.
  void DropStaleRemoteCopies(const StaleRemoteCopies& stale)
      KVSTASH_REQUIRES(write_mu_) KVSTASH_EXCLUDES(index_mu_);

  // --- Get, in its phases (store_read.cc): PlanGet, ReadT0, ReadT1, ReadT2, then
  // AccountGet (drops, counters, recency) and PromoteGetHits.
  GetState PlanGet(std::span<const StoredKey> keys) KVSTASH_EXCLUDES(index_mu_);
  void ReadT0(GetState* g);
  // Errors: T1's read error (the whole Get fails).
  Status ReadT1(GetState* g);
  void ReadT2(GetState* g);
  void AccountGet(GetState* g) KVSTASH_EXCLUDES(write_mu_, index_mu_);
  // Best effort: skipped when another writer holds the store.
  void PromoteGetHits(GetState* g) KVSTASH_EXCLUDES(write_mu_, index_mu_);

  StoreOptions opts_;
  PerTier<bool> on_;
  std::unique_ptr<RocksTier> t1_;
  std::unique_ptr<RedisTier> t2_;

  Mutex write_mu_ KVSTASH_ACQUIRED_BEFORE(index_mu_);
  mutable SharedMutex index_mu_;
  PrefixIndex index_ KVSTASH_GUARDED_BY(index_mu_);
  const uint64_t max_entries_;  // index_.max_entries(), fixed at construction
  PerTier<uint64_t> bytes_ KVSTASH_GUARDED_BY(index_mu_);
  PerTier<uint64_t> entries_ KVSTASH_GUARDED_BY(index_mu_);
  uint64_t pinned_ KVSTASH_GUARDED_BY(index_mu_) = 0;
  PerTier<uint64_t> budget_;
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

// Sets the content fields of an index entry from its meta record: tokens, sizes,
// checksums, codec, creation time, last access (seconds) and hits. Flags and links are
// the caller's. The inverse of Store::Impl::MetaOf for those fields.
void DescribeEntry(const MetaRecord& m, IndexEntry* e);

// True when `b` holds `size` bytes whose XXH3-64 is `checksum` (null: size 0).
bool Matches(const SharedBytes& b, uint64_t size, uint64_t checksum);

}  // namespace kvstash::store
