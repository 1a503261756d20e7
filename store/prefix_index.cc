#include "store/prefix_index.h"

#include <algorithm>
#include <bit>

#include "common/byte_io.h"

namespace kvstash::store {
namespace {

// Redis' LFU constants (redis.conf lfu-log-factor 10; LFU_INIT_VAL 5).
constexpr uint8_t kLfuInit = 5;
constexpr double kLfuLogFactor = 10.0;

// Key table slots for n entries at load <= 0.7.
uint64_t TableSizeFor(uint64_t n) {
  uint64_t size = 16;
  while (n * 10 > size * 7) size *= 2;
  return size;
}

}  // namespace

size_t StoredKeyHash::operator()(const StoredKey& k) const {
  return static_cast<size_t>(LoadLe<uint64_t>(k.data()));
}

uint64_t PrefixIndex::MaxBytesForEntries(uint64_t n) {
  const uint64_t blocks = (n + kBlockEntries - 1) / kBlockEntries;
  return sizeof(PrefixIndex) + blocks * (kBlockEntries * sizeof(IndexEntry) + sizeof(void*)) +
         TableSizeFor(n) * sizeof(uint32_t) + kNumSlots * n * sizeof(uint32_t);
}

PrefixIndex::PrefixIndex(uint64_t budget_bytes, EvictionPolicy policy, uint32_t samples,
                         uint32_t lfu_decay_accesses, uint64_t seed, bool t2_on)
    : policy_(policy),
      t2_on_(t2_on),
      samples_(std::max<uint32_t>(1, samples)),
      lfu_decay_accesses_(std::max<uint32_t>(1, lfu_decay_accesses)),
      rng_state_(seed) {
  // Largest n whose worst-case footprint fits the budget (ids must stay below kNoEntry).
  uint64_t lo = 0, hi = std::min<uint64_t>(budget_bytes / sizeof(IndexEntry) + 1, kNoEntry - 1);
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (MaxBytesForEntries(mid) <= budget_bytes) lo = mid; else hi = mid - 1;
  }
  max_entries_ = lo;
  table_limit_ = TableSizeFor(max_entries_);
  blocks_.reserve((max_entries_ + kBlockEntries - 1) / kBlockEntries);
  if (max_entries_ > 0) table_.assign(16, kNoEntry);
}

uint64_t PrefixIndex::MemoryBytes() const {
  uint64_t bytes = sizeof(PrefixIndex) + blocks_.capacity() * sizeof(void*) +
                   blocks_.size() * kBlockEntries * sizeof(IndexEntry) +
                   table_.capacity() * sizeof(uint32_t);
  for (const auto& c : candidates_) bytes += c.capacity() * sizeof(uint32_t);
  return bytes;
}

uint64_t PrefixIndex::SlotOf(const StoredKey& key) const {
  return LoadLe<uint64_t>(key.data()) & (table_.size() - 1);
}

uint32_t PrefixIndex::Find(const StoredKey& key) const {
  if (table_.empty()) return kNoEntry;
  const uint64_t mask = table_.size() - 1;
  for (uint64_t i = SlotOf(key);; i = (i + 1) & mask) {
    const uint32_t id = table_[i];
    if (id == kNoEntry) return kNoEntry;
    if (at(id).key == key) return id;
  }
}

void PrefixIndex::GrowTable() {
  std::vector<uint32_t> old;
  old.swap(table_);
  table_.assign(old.size() * 2, kNoEntry);
  const uint64_t mask = table_.size() - 1;
  for (uint32_t id : old) {
    if (id == kNoEntry) continue;
    uint64_t i = SlotOf(at(id).key);
    while (table_[i] != kNoEntry) i = (i + 1) & mask;
    table_[i] = id;
  }
}

void PrefixIndex::TableInsert(uint32_t id) {
  if ((size_ + 1) * 10 > table_.size() * 7 && table_.size() < table_limit_) GrowTable();
  const uint64_t mask = table_.size() - 1;
  uint64_t i = SlotOf(at(id).key);
  while (table_[i] != kNoEntry) i = (i + 1) & mask;
  table_[i] = id;
}

void PrefixIndex::TableErase(uint32_t id) {
  const uint64_t mask = table_.size() - 1;
  uint64_t i = SlotOf(at(id).key);
  while (table_[i] != id) i = (i + 1) & mask;
  // Backward-shift deletion: move later members of the probe run into the hole when
  // their home slot does not lie cyclically in (hole, their slot].
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (table_[j] == kNoEntry) break;
    const uint64_t home = SlotOf(at(table_[j]).key);
    const bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    table_[i] = table_[j];
    i = j;
  }
  table_[i] = kNoEntry;
}

bool PrefixIndex::EvictionRemoves(const IndexEntry& e, int slot) const {
  switch (slot) {
    case 0: return !(e.flags & (kInT1 | kInT2)) && !t2_on_;
    case 1: return !(e.flags & kInT2) && !t2_on_;
    case 2: return !(e.flags & (kInT0 | kInT1));
    default: return true;
  }
}

bool PrefixIndex::WantsCandidate(const IndexEntry& e, int slot) const {
  if (!e.live() || (e.flags & kPinned) || e.children[slot] != 0) return false;
  if (slot != kAnySlot && !(e.flags & TierBit(slot))) return false;
  return !EvictionRemoves(e, slot) || e.children[kAnySlot] == 0;
}

void PrefixIndex::Refresh(uint32_t id) {
  IndexEntry& e = at(id);
  for (int s = 0; s < kNumSlots; ++s) {
    std::vector<uint32_t>& c = candidates_[s];
    const bool want = WantsCandidate(e, s);
    if (want && e.pos[s] == kNoEntry) {
      if (c.size() == c.capacity()) {
        c.reserve(std::min<uint64_t>(max_entries_, std::max<uint64_t>(64, c.capacity() * 2)));
      }
      e.pos[s] = static_cast<uint32_t>(c.size());
      c.push_back(id);
    } else if (!want && e.pos[s] != kNoEntry) {
      const uint32_t last = c.back();
      c[e.pos[s]] = last;
      at(last).pos[s] = e.pos[s];
      c.pop_back();
      e.pos[s] = kNoEntry;
    }
  }
}

void PrefixIndex::AdjustParentCounts(const IndexEntry& e, uint8_t old_flags,
                                     uint8_t new_flags) {
  if (e.parent == kNoEntry) return;
  IndexEntry& p = at(e.parent);
  for (int s = 0; s < kNumTiers; ++s) {
    const uint8_t bit = TierBit(s);
    if ((old_flags & bit) == (new_flags & bit)) continue;
    if (new_flags & bit) ++p.children[s]; else --p.children[s];
  }
  Refresh(e.parent);
}

uint32_t PrefixIndex::Insert(const StoredKey& key, uint32_t parent, uint8_t flags) {
  uint32_t id;
  if (free_head_ != kNoEntry) {
    id = free_head_;
    free_head_ = at(id).parent;
  } else {
    id = next_unused_++;
    if (id / kBlockEntries >= blocks_.size()) {
      blocks_.push_back(std::make_unique<IndexEntry[]>(kBlockEntries));
    }
  }
  IndexEntry& e = at(id);
  e = IndexEntry{};
  e.key = key;
  e.parent = parent;
  e.flags = static_cast<uint8_t>(flags | kLive);
  e.freq = kLfuInit;
  // An insert is an access: the clock that ages LFU counters and orders LRU advances on
  // PUTs too, so counters decay with the cache's turnover (with only GET hits moving it,
  // a chunk hit once outranked every fresh chunk for thousands of PUTs when hits are
  // rare: kvstash-bench trace, 1-3% budgets) and fresh entries are not tied in age.
  e.tick = ++tick_;
  TableInsert(id);
  ++size_;
  if (parent != kNoEntry) {
    IndexEntry& p = at(parent);
    e.next_sibling = p.first_child;
    if (p.first_child != kNoEntry) at(p.first_child).prev_sibling = id;
    p.first_child = id;
    ++p.children[kAnySlot];
  }
  AdjustParentCounts(e, 0, e.flags);  // also refreshes the parent
  Refresh(id);
  return id;
}

void PrefixIndex::Remove(uint32_t id) {
  IndexEntry& e = at(id);
  AdjustParentCounts(e, e.flags, 0);
  if (e.parent != kNoEntry) {
    IndexEntry& p = at(e.parent);
    if (e.prev_sibling != kNoEntry) at(e.prev_sibling).next_sibling = e.next_sibling;
    else p.first_child = e.next_sibling;
    if (e.next_sibling != kNoEntry) at(e.next_sibling).prev_sibling = e.prev_sibling;
    --p.children[kAnySlot];
    Refresh(e.parent);
  }
  TableErase(id);
  e.flags = 0;
  Refresh(id);  // not live: leaves every candidate array
  e = IndexEntry{};
  e.parent = free_head_;
  free_head_ = id;
  --size_;
}

void PrefixIndex::SetFlags(uint32_t id, uint8_t flags) {
  IndexEntry& e = at(id);
  const uint8_t old = e.flags;
  e.flags = static_cast<uint8_t>(flags | kLive);
  AdjustParentCounts(e, old, e.flags);
  Refresh(id);
}

uint8_t PrefixIndex::DecayedFreq(const IndexEntry& e) const {
  const uint32_t periods = (tick_ - e.tick) / lfu_decay_accesses_;
  return periods >= e.freq ? 0 : static_cast<uint8_t>(e.freq - periods);
}

uint64_t PrefixIndex::NextRandom() {
  // SplitMix64 (Steele, Lea, Flood 2014).
  uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void PrefixIndex::Touch(uint32_t id) {
  IndexEntry& e = at(id);
  ++tick_;
  uint8_t c = DecayedFreq(e);
  if (c < 255) {
    const double r = static_cast<double>(NextRandom() >> 11) * 0x1.0p-53;
    const double base = c > kLfuInit ? c - kLfuInit : 0;
    if (r < 1.0 / (base * kLfuLogFactor + 1.0)) ++c;
  }
  e.freq = c;
  e.tick = tick_;
  if (e.hits != UINT32_MAX) ++e.hits;
}

uint32_t PrefixIndex::PickVictim(int slot, const std::function<bool(uint32_t)>& excluded) {
  const std::vector<uint32_t>& c = candidates_[slot];
  if (c.empty()) return kNoEntry;
  uint32_t best = kNoEntry;
  uint32_t best_freq = 0, best_age = 0;
  auto consider = [&](uint32_t id) {
    if (excluded && excluded(id)) return;
    const IndexEntry& e = at(id);
    const uint32_t freq = policy_ == EvictionPolicy::kLfuDecay ? DecayedFreq(e) : 0;
    const uint32_t age = tick_ - e.tick;
    if (best == kNoEntry || freq < best_freq || (freq == best_freq && age > best_age)) {
      best = id;
      best_freq = freq;
      best_age = age;
    }
  };
  if (c.size() <= samples_) {
    for (uint32_t id : c) consider(id);
    return best;
  }
  for (uint32_t k = 0; k < samples_; ++k) consider(c[NextRandom() % c.size()]);
  if (best == kNoEntry) {
    for (uint32_t id : c) consider(id);  // every sample was excluded: look at all
  }
  return best;
}

std::vector<uint32_t> PrefixIndex::SubtreePostOrder(uint32_t id) const {
  std::vector<uint32_t> pre{id};
  for (size_t i = 0; i < pre.size(); ++i) {
    for (uint32_t c = at(pre[i]).first_child; c != kNoEntry; c = at(c).next_sibling) {
      pre.push_back(c);
    }
  }
  // Reversed breadth-first order puts every child before its parent.
  std::reverse(pre.begin(), pre.end());
  return pre;
}

void PrefixIndex::ForEach(const std::function<void(uint32_t)>& fn) const {
  for (uint32_t id = 0; id < next_unused_; ++id) {
    if (at(id).live()) fn(id);
  }
}

}  // namespace kvstash::store
