// PrefixIndex: the in-process index of a Store. One entry per stored chunk: its key,
// parent link, sizes, tier residency, pin, access statistics, and the T0 copy of its
// bytes. Entries form prefix trees through parent/child links.
//
// READ ME FIRST
// - Not thread-safe: the Store guards it (shared lock for reads, exclusive for
//   writes). Entry ids are stable until the entry is removed; removed ids are reused.
// - Eviction candidates are kept per "slot" (T0, T1, T2, and kAnySlot = the entry as a
//   whole): an entry is a candidate of a slot when it is unpinned, resident there
//   (kAnySlot: always) and none of its children is resident there. So a chain's tail
//   always goes before its head, and pinned entries never go. Each slot's candidates
//   An eviction that would remove the entry's last copy (no other tier holds it and
//   no lower tier takes it) additionally needs the entry to have no children at all.
//   Each slot's candidates
//   sit in a dense array (O(1) add/remove by swap with the last element); a victim is
//   the worst of `samples` uniformly random candidates (Redis' sampled eviction,
//   evict.c), worst = lowest decayed LFU counter then oldest access (kLfuDecay), or
//   oldest access (kLru).
// - Keys are SHA-256 prefixes, uniformly distributed, so the key table is open
//   addressing with linear probing on the key's first 8 bytes, backward-shift
//   deletion (Knuth, TAOCP vol. 3, 6.4 Algorithm R), load <= 0.7.
// - Memory is bounded: entries live in fixed blocks of kBlockEntries, the key table
//   and candidate arrays never grow past what `max_entries` needs, and max_entries is
//   derived from the byte budget given at construction (MemoryBytes() <= budget).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/prefix_key.h"
#include "store/store_options.h"
#include "store/store_types.h"

namespace kvstash::store {

inline constexpr uint32_t kNoEntry = 0xFFFFFFFFu;
inline constexpr int kAnySlot = 3;
inline constexpr int kNumSlots = 4;

// Entry flag bits.
inline constexpr uint8_t kInT0 = 1u << 0;
inline constexpr uint8_t kInT1 = 1u << 1;
inline constexpr uint8_t kInT2 = 1u << 2;
inline constexpr uint8_t kResidentMask = kInT0 | kInT1 | kInT2;
inline constexpr uint8_t kPinned = 1u << 3;
inline constexpr uint8_t kHasState = 1u << 4;
inline constexpr uint8_t kPartial = 1u << 5;
inline constexpr uint8_t kLive = 1u << 7;

// Residency bit of tier slot 0..2.
constexpr uint8_t TierBit(int slot) { return static_cast<uint8_t>(1u << slot); }

// The T0 copy of a chunk: immutable once built, shared with readers.
struct MemoryRecord {
  SharedBytes payload;  // non-null
  SharedBytes state;    // null when the chunk has no state record
};

struct IndexEntry {
  StoredKey key{};
  uint32_t parent = kNoEntry;
  uint32_t first_child = kNoEntry;
  uint32_t next_sibling = kNoEntry;
  uint32_t prev_sibling = kNoEntry;
  uint32_t tokens = 0;
  uint32_t payload_bytes = 0;
  uint32_t state_bytes = 0;
  uint32_t tick = 0;               // logical time of the last access
  uint32_t children[kNumSlots] = {};  // children resident per slot (kAnySlot: all)
  uint32_t pos[kNumSlots] = {kNoEntry, kNoEntry, kNoEntry, kNoEntry};  // in candidates
  uint64_t payload_checksum = 0;   // XXH3-64 of the payload
  uint64_t state_checksum = 0;     // XXH3-64 of the state record (0: none)
  uint64_t created_ms = 0;         // unix ms of the Put
  uint32_t access_s = 0;           // unix seconds of the last Get hit (or the Put)
  uint32_t hits = 0;               // Get hits since creation
  uint16_t codec = 0;
  uint8_t freq = 0;                // LFU counter
  uint8_t flags = 0;
  std::shared_ptr<const MemoryRecord> t0;  // set iff flags & kInT0

  uint64_t bytes() const { return uint64_t{payload_bytes} + state_bytes; }
  bool live() const { return flags & kLive; }
};

// Hash of a stored key for std:: containers (keys are uniform SHA-256 prefixes).
struct StoredKeyHash {
  size_t operator()(const StoredKey& k) const;
};

class PrefixIndex {
 public:
  static constexpr uint32_t kBlockEntries = 256;
  // Bytes of index memory one entry costs at most (entry, key table at the minimum
  // load, candidate arrays); used to derive max_entries from the budget.
  static uint64_t MaxBytesForEntries(uint64_t n);

  // `budget_bytes` bounds MemoryBytes(); `seed` seeds the eviction sampler.
  // `t2_on`: T2 takes entries that T1 (or T0 when T1 is off) evicts.
  PrefixIndex(uint64_t budget_bytes, EvictionPolicy policy, uint32_t samples,
              uint32_t lfu_decay_accesses, uint64_t seed, bool t2_on);

  uint64_t size() const { return size_; }
  uint64_t max_entries() const { return max_entries_; }
  // Current memory of the index structures (bytes); <= the budget.
  uint64_t MemoryBytes() const;

  // Id of `key`, or kNoEntry.
  uint32_t Find(const StoredKey& key) const;
  IndexEntry& at(uint32_t id) { return Block(id)[id % kBlockEntries]; }
  const IndexEntry& at(uint32_t id) const { return Block(id)[id % kBlockEntries]; }

  // Adds `key` as a child of `parent` (kNoEntry: a root) with `flags` (kLive is added)
  // and returns its id. New entries start at the LFU initial counter; an insert is an
  // access (it advances the tick and takes the new value). REQUIRES: key absent, size() < max_entries(), parent live or kNoEntry.
  uint32_t Insert(const StoredKey& key, uint32_t parent, uint8_t flags);
  // Removes a childless entry. REQUIRES: live, no children.
  void Remove(uint32_t id);
  // Sets the residency/pin/state/partial flags of a live entry, keeping the parent's
  // per-slot child counts and the candidate arrays in step.
  void SetFlags(uint32_t id, uint8_t flags);

  // Records an access (Get hit): LFU increment after decay, tick update.
  void Touch(uint32_t id);

  // The victim of `slot` (0..2 tier, kAnySlot whole entry) among its candidates, or
  // kNoEntry when there is none outside `excluded` (checked per sampled candidate).
  uint32_t PickVictim(int slot, const std::function<bool(uint32_t)>& excluded);
  // Number of eviction candidates of `slot`.
  uint64_t CandidateCount(int slot) const { return candidates_[slot].size(); }

  // `id` and all its descendants, children before parents (removal order).
  std::vector<uint32_t> SubtreePostOrder(uint32_t id) const;
  // Calls fn(id) for every live entry.
  void ForEach(const std::function<void(uint32_t)>& fn) const;

 private:
  IndexEntry* Block(uint32_t id) const { return blocks_[id / kBlockEntries].get(); }
  uint64_t SlotOf(const StoredKey& key) const;
  void TableInsert(uint32_t id);
  void TableErase(uint32_t id);
  void GrowTable();
  bool WantsCandidate(const IndexEntry& e, int slot) const;
  bool EvictionRemoves(const IndexEntry& e, int slot) const;
  void Refresh(uint32_t id);
  void AdjustParentCounts(const IndexEntry& e, uint8_t old_flags, uint8_t new_flags);
  uint8_t DecayedFreq(const IndexEntry& e) const;
  uint64_t NextRandom();

  EvictionPolicy policy_;
  bool t2_on_;
  uint32_t samples_;
  uint32_t lfu_decay_accesses_;
  uint64_t rng_state_;
  uint64_t max_entries_ = 0;
  uint64_t size_ = 0;
  uint32_t tick_ = 0;
  uint32_t free_head_ = kNoEntry;   // free list through IndexEntry::parent
  uint32_t next_unused_ = 0;        // ids below this were handed out at least once
  std::vector<std::unique_ptr<IndexEntry[]>> blocks_;
  std::vector<uint32_t> table_;     // ids, kNoEntry = empty; size a power of two
  uint64_t table_limit_ = 0;        // largest table size max_entries needs
  std::vector<uint32_t> candidates_[kNumSlots];
};

}  // namespace kvstash::store
