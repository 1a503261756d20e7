// PrefixIndex against a std::map model: lookups, parent/child links, per-slot child
// counts, eviction candidates, and the memory bound under millions of random keys.
#include "store/prefix_index.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <array>
#include <map>
#include <random>
#include <set>

#include "common/byte_io.h"

namespace kvstash::store {
namespace {

StoredKey RandomKey(std::mt19937_64& rng) {
  StoredKey k;
  StoreLe<uint64_t>(k.data(), rng());
  StoreLe<uint64_t>(k.data() + 8, rng());
  return k;
}

struct ModelEntry {
  std::optional<StoredKey> parent;
  uint8_t flags = 0;
};

// Children per slot of every key, from the model.
using ChildCounts = std::map<StoredKey, std::array<uint32_t, kNumSlots>>;
ChildCounts CountChildren(const std::map<StoredKey, ModelEntry>& model) {
  ChildCounts counts;
  for (const auto& [k, c] : model) {
    if (!c.parent) continue;
    auto& n = counts[*c.parent];
    ++n[kAnySlot];
    for (int s = 0; s < kNumTiers; ++s) n[s] += (c.flags & TierBit(s)) != 0;
  }
  return counts;
}

// Eligibility of `key` as a candidate of `slot`, computed from the model alone.
bool Eligible(const std::map<StoredKey, ModelEntry>& model, const ChildCounts& counts,
              const StoredKey& key, int slot, bool t2_on) {
  const ModelEntry& e = model.at(key);
  if (e.flags & kPinned) return false;
  if (slot < kNumTiers && !(e.flags & TierBit(slot))) return false;
  auto it = counts.find(key);
  const uint32_t in_slot = it == counts.end() ? 0 : it->second[slot];
  const uint32_t any = it == counts.end() ? 0 : it->second[kAnySlot];
  if (in_slot != 0) return false;
  bool removes = true;
  if (slot == 0) removes = !(e.flags & (kInT1 | kInT2)) && !t2_on;
  if (slot == 1) removes = !(e.flags & kInT2) && !t2_on;
  if (slot == 2) removes = !(e.flags & (kInT0 | kInT1));
  return !removes || any == 0;
}

class PrefixIndexModel : public ::testing::TestWithParam<bool> {};

TEST_P(PrefixIndexModel, RandomOperationsMatchModel) {
  const bool t2_on = GetParam();
  std::mt19937_64 rng(20261129);
  PrefixIndex index(64ull << 20, EvictionPolicy::kLfuDecay, 8, 64, 7, t2_on);
  std::map<StoredKey, ModelEntry> model;
  std::vector<StoredKey> keys;  // live keys, for random picks
  auto pick = [&]() { return keys[rng() % keys.size()]; };
  auto remove_key = [&](const StoredKey& k) {
    model.erase(k);
    keys.erase(std::find(keys.begin(), keys.end(), k));
  };
  for (int op = 0; op < 60000; ++op) {
    const int r = static_cast<int>(rng() % 100);
    if (keys.empty() || r < 40) {
      const StoredKey k = RandomKey(rng);
      std::optional<StoredKey> parent;
      if (!keys.empty() && rng() % 4 != 0) parent = pick();
      const uint8_t flags = static_cast<uint8_t>(rng() % 16);  // tiers + pin
      const uint32_t id = index.Insert(k, parent ? index.Find(*parent) : kNoEntry, flags);
      ASSERT_NE(id, kNoEntry);
      model[k] = {parent, static_cast<uint8_t>(flags)};
      keys.push_back(k);
    } else if (r < 70) {
      // Remove a random childless entry.
      const StoredKey k = pick();
      const uint32_t id = index.Find(k);
      if (index.at(id).children[kAnySlot] != 0) continue;
      index.Remove(id);
      remove_key(k);
    } else if (r < 90) {
      const StoredKey k = pick();
      const uint8_t flags = static_cast<uint8_t>(rng() % 16);
      index.SetFlags(index.Find(k), flags);
      model[k].flags = flags;
    } else {
      index.Touch(index.Find(pick()));
    }
    if (op % 2000 == 0 || op == 59999) {
      ASSERT_EQ(index.size(), model.size());
      for (int probe = 0; probe < 100; ++probe) {
        EXPECT_EQ(index.Find(RandomKey(rng)), kNoEntry);
      }
      for (const auto& [k, m] : model) {
        const uint32_t id = index.Find(k);
        ASSERT_NE(id, kNoEntry);
        const IndexEntry& e = index.at(id);
        ASSERT_EQ(e.key, k);
        ASSERT_EQ(e.flags & 0x0F, m.flags);
        ASSERT_EQ(e.parent == kNoEntry, !m.parent.has_value());
        if (m.parent) ASSERT_EQ(index.at(e.parent).key, *m.parent);
      }
      const ChildCounts counts = CountChildren(model);
      for (int slot = 0; slot < kNumSlots; ++slot) {
        uint64_t eligible = 0;
        for (const auto& [k, m] : model) eligible += Eligible(model, counts, k, slot, t2_on);
        ASSERT_EQ(index.CandidateCount(slot), eligible) << "slot " << slot;
        for (int s = 0; s < 20 && eligible > 0; ++s) {
          const uint32_t v = index.PickVictim(slot, nullptr);
          ASSERT_NE(v, kNoEntry);
          ASSERT_TRUE(Eligible(model, counts, index.at(v).key, slot, t2_on));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutT2, PrefixIndexModel, ::testing::Bool());

TEST(PrefixIndex, SubtreePostOrderPutsChildrenFirst) {
  PrefixIndex index(1 << 20, EvictionPolicy::kLru, 4, 16, 1, false);
  std::mt19937_64 rng(3);
  const uint32_t root = index.Insert(RandomKey(rng), kNoEntry, kInT0);
  const uint32_t a = index.Insert(RandomKey(rng), root, kInT0);
  const uint32_t b = index.Insert(RandomKey(rng), root, kInT0);
  const uint32_t a1 = index.Insert(RandomKey(rng), a, kInT0);
  const uint32_t other = index.Insert(RandomKey(rng), kNoEntry, kInT0);
  std::vector<uint32_t> order = index.SubtreePostOrder(root);
  ASSERT_EQ(order.size(), 4u);
  auto at = [&](uint32_t id) { return std::find(order.begin(), order.end(), id) - order.begin(); };
  EXPECT_LT(at(a1), at(a));
  EXPECT_LT(at(a), at(root));
  EXPECT_LT(at(b), at(root));
  EXPECT_EQ(std::count(order.begin(), order.end(), other), 0);
  for (uint32_t id : order) index.Remove(id);
  EXPECT_EQ(index.size(), 1u);
}

TEST(PrefixIndex, PinnedAndNonLeafEntriesAreNeverVictims) {
  PrefixIndex index(1 << 20, EvictionPolicy::kLfuDecay, 16, 16, 1, false);
  std::mt19937_64 rng(4);
  // T0 in front of T1 (T0 ⊆ T1), no T2.
  const uint32_t head = index.Insert(RandomKey(rng), kNoEntry, kInT0 | kInT1);
  const uint32_t mid = index.Insert(RandomKey(rng), head, kInT0 | kInT1);
  const uint32_t tail = index.Insert(RandomKey(rng), mid, kInT0 | kInT1);
  EXPECT_EQ(index.PickVictim(0, nullptr), tail);
  EXPECT_EQ(index.PickVictim(1, nullptr), tail);
  index.SetFlags(tail, kInT0 | kInT1 | kPinned);
  EXPECT_EQ(index.PickVictim(0, nullptr), kNoEntry);  // the tail is pinned: chain stays
  EXPECT_EQ(index.PickVictim(1, nullptr), kNoEntry);
  index.SetFlags(tail, kInT1 | kPinned);  // tail leaves T0: mid is T0's tail
  EXPECT_EQ(index.PickVictim(0, nullptr), mid);
  EXPECT_EQ(index.PickVictim(1, nullptr), kNoEntry);  // T1 still holds the pinned tail
  EXPECT_EQ(index.PickVictim(0, [&](uint32_t id) { return id == mid; }), kNoEntry);
  // Removing the last copy of an entry with children is never chosen.
  index.SetFlags(mid, kInT0);
  index.SetFlags(tail, kInT1);
  EXPECT_EQ(index.PickVictim(0, nullptr), kNoEntry);
  EXPECT_EQ(index.PickVictim(1, nullptr), tail);
}

TEST(PrefixIndex, LfuKeepsFrequentlyHitEntries) {
  PrefixIndex index(1 << 20, EvictionPolicy::kLfuDecay, 64, 1 << 20, 5, false);
  std::mt19937_64 rng(5);
  std::vector<uint32_t> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(index.Insert(RandomKey(rng), kNoEntry, kInT0));
  for (int h = 0; h < 2000; ++h) index.Touch(ids[7]);
  for (int i = 0; i < 31; ++i) {
    const uint32_t v = index.PickVictim(0, nullptr);
    ASSERT_NE(v, ids[7]) << "after " << i << " evictions";
    index.Remove(v);
  }
}

TEST(PrefixIndex, LruEvictsTheOldestAccess) {
  PrefixIndex index(1 << 20, EvictionPolicy::kLru, 64, 16, 5, false);
  std::mt19937_64 rng(6);
  std::vector<uint32_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(index.Insert(RandomKey(rng), kNoEntry, kInT0));
  for (int i = 9; i >= 0; --i) index.Touch(ids[i]);  // ids[9] oldest access now
  EXPECT_EQ(index.PickVictim(0, nullptr), ids[9]);
}

TEST(PrefixIndex, MemoryStaysWithinBudgetUnderMillionsOfRandomPrefixes) {
  constexpr uint64_t kBudget = 32ull << 20;
#if !defined(__SANITIZE_ADDRESS__)
  const size_t heap_before = mallinfo2().uordblks + mallinfo2().hblkhd;
#endif
  uint64_t peak = 0;
  {
    PrefixIndex index(kBudget, EvictionPolicy::kLfuDecay, 16, 4096, 9, false);
    ASSERT_GT(index.max_entries(), 100000u);
    std::mt19937_64 rng(7);
    std::vector<uint32_t> recent;
    for (uint64_t i = 0; i < 2'000'000; ++i) {
      if (index.size() == index.max_entries()) {
        const uint32_t v = index.PickVictim(kAnySlot, nullptr);
        ASSERT_NE(v, kNoEntry);
        // Remove leaves only (victims are leaves by construction).
        ASSERT_EQ(index.at(v).children[kAnySlot], 0u);
        index.Remove(v);
      }
      // Short random chains: a new root, or a child of a recent entry still present.
      uint32_t parent = kNoEntry;
      if (!recent.empty() && rng() % 2 == 0) {
        const uint32_t p = recent[rng() % recent.size()];
        if (index.at(p).live()) parent = p;
      }
      const uint32_t id = index.Insert(RandomKey(rng), parent, kInT0 | kInT1);
      if (recent.size() < 64) recent.push_back(id); else recent[rng() % 64] = id;
      if (i % 100000 == 0) peak = std::max(peak, index.MemoryBytes());
    }
    peak = std::max(peak, index.MemoryBytes());
    EXPECT_LE(peak, kBudget);
    EXPECT_EQ(index.size(), index.max_entries());
#if !defined(__SANITIZE_ADDRESS__)
    const size_t heap_after = mallinfo2().uordblks + mallinfo2().hblkhd;
    // The real heap growth (what malloc handed out) stays within the budget too.
    EXPECT_LE(heap_after - heap_before, kBudget + (1u << 20));
    std::cout << "index: " << index.size() << " entries in " << index.MemoryBytes()
              << " bytes (heap +" << (heap_after - heap_before) << ")\n";
#endif
  }
}

}  // namespace
}  // namespace kvstash::store
