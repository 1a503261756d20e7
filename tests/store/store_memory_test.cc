// Store behaviour on the in-memory tier (T0 only): validation, lookups, hybrid state,
// namespace isolation, pins, tail-first eviction, readers racing deletes, and the index
// memory bound under a million distinct random prefixes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "kvstash/payload_format.h"
#include "store/prefix_index.h"
#include "store/store.h"
#include "tests/store/store_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::store::testing {
namespace {

std::unique_ptr<Store> MemoryStore(uint64_t budget = 64 << 20) {
  StoreOptions o;
  o.memory_budget_bytes = budget;
  return Store::Open(o).value();
}

bool Same(std::span<const uint8_t> a, const std::vector<uint8_t>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

TEST(StoreMemory, OpenRejectsInconsistentOptions) {
  StoreOptions none;
  none.memory_budget_bytes = 0;
  EXPECT_STATUS(Store::Open(none), kInvalidArgument);
  StoreOptions tiny_index;
  tiny_index.index_budget_bytes = 100;
  EXPECT_STATUS(Store::Open(tiny_index), kInvalidArgument);
  StoreOptions bad_redis;
  bad_redis.redis.endpoints = {"no-port"};
  EXPECT_STATUS(Store::Open(bad_redis), kInvalidArgument);
}

TEST(StoreMemory, PutValidationLeavesNothingVisible) {
  auto store = MemoryStore();
  const Chain c = MakeChain(TestNamespace(), 1, 3, 100);
  std::vector<PutChunk> puts = c.Puts();

  auto expect_nothing = [&]() {
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(c.stored(), false));
    EXPECT_EQ(r.keys.size(), 0u);
    EXPECT_EQ(store->Stats().index_entries, 0u);
  };
  std::vector<PutChunk> bad = puts;
  bad[1].payload = {};
  EXPECT_STATUS(store->Put(bad), kInvalidArgument);
  expect_nothing();
  bad = puts;
  bad[2].tokens = 0;
  EXPECT_STATUS(store->Put(bad), kInvalidArgument);
  bad = puts;
  bad[2].key = bad[0].key;
  EXPECT_STATUS(store->Put(bad), kInvalidArgument);
  bad = puts;
  bad[1].parent = bad[1].key;
  EXPECT_STATUS(store->Put(bad), kInvalidArgument);
  // A chain whose first chunk is missing: NotFound, and its other chunks stay absent.
  EXPECT_STATUS(store->Put(std::span(puts).subspan(1)), kNotFound);
  expect_nothing();
  // A parent listed after its child is not "earlier in this Put".
  std::vector<PutChunk> reversed(puts.rbegin(), puts.rend());
  EXPECT_STATUS(store->Put(reversed), kNotFound);
  expect_nothing();
  ASSERT_OK(store->Put(std::span<const PutChunk>()));
  EXPECT_EQ(store->Stats().put_failures, 6u);
}

TEST(StoreMemory, LookupAndGetRoundTrip) {
  auto store = MemoryStore();
  const Digest256 ns = TestNamespace();
  for (size_t n : {size_t{0}, size_t{1}, size_t{5}}) {
    const Chain c = MakeChain(ns, 100 + n, n, 999);
    ASSERT_OK(store->Put(c.Puts()));
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, c.tokens, 256, false));
    EXPECT_EQ(r.matched_tokens, 256 * n);
    EXPECT_EQ(r.keys, c.stored());
    for (Tier t : r.tiers) EXPECT_EQ(t, Tier::kMemory);
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(got[i].found);
      EXPECT_EQ(got[i].tier, Tier::kMemory);
      EXPECT_EQ(got[i].tokens, 256u);
      EXPECT_TRUE(Same(got[i].payload_bytes(), c.payloads[i]));
      EXPECT_FALSE(got[i].state);
    }
    // Longer prompts match only the stored prefix; a different first token matches 0.
    std::vector<uint32_t> longer = c.tokens;
    longer.insert(longer.end(), 700, 7);
    ASSERT_OK_AND_ASSIGN(r, store->Lookup(ns, longer, 256, false));
    EXPECT_EQ(r.matched_tokens, 256 * n);
    if (n > 0) {
      std::vector<uint32_t> other = c.tokens;
      other[0] ^= 1;
      ASSERT_OK_AND_ASSIGN(r, store->Lookup(ns, other, 256, false));
      EXPECT_EQ(r.matched_tokens, 0u);
    }
  }
  EXPECT_STATUS(store->Lookup(ns, std::vector<uint32_t>(10, 1), 0, false), kInvalidArgument);
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.puts, 6u);
  EXPECT_EQ(s.tiers[0].entries, 6u);
  EXPECT_EQ(s.tiers[0].hits, 6u);
}

TEST(StoreMemory, PartialFinalChunkIsNeverServedAsFull) {
  auto store = MemoryStore();
  const Digest256 ns = TestNamespace();
  // 2 full chunks + 44 tokens: stored under the partial key (kind 0x02).
  const Chain c = MakeChain(ns, 5, 2, 300, 256, false, /*extra_tokens=*/44);
  ASSERT_EQ(c.keys.size(), 3u);
  ASSERT_TRUE(c.keys[2].partial);
  ASSERT_OK(store->Put(c.Puts()));
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, c.tokens, 256, false));
  EXPECT_EQ(r.matched_tokens, 556u);
  // The same 556 tokens followed by more: the third chunk is now full and its key
  // differs from the partial one, so only the two full chunks match.
  std::vector<uint32_t> longer = c.tokens;
  longer.resize(256 * 3 + 10, 3);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(ns, longer, 256, false));
  EXPECT_EQ(r.matched_tokens, 512u);
  // A shorter partial tail (43 tokens) is a different key too.
  std::vector<uint32_t> shorter(c.tokens.begin(), c.tokens.end() - 1);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(ns, shorter, 256, false));
  EXPECT_EQ(r.matched_tokens, 512u);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(std::vector<StoredKey>{c.keys[2].stored()}));
  EXPECT_TRUE(got[0].partial);
  EXPECT_EQ(got[0].tokens, 44u);
}

TEST(StoreMemory, NamespaceIsolation) {
  auto store = MemoryStore();
  const Chain base = MakeChain(TestNamespace("fp-a", "lora", "1", ""), 9, 3, 200);
  ASSERT_OK(store->Put(base.Puts()));
  struct Case {
    const char* what;
    Digest256 ns;
  } cases[] = {
      {"same adapter name, different id", TestNamespace("fp-a", "lora", "2", "")},
      {"adapter name equal to a cache salt", TestNamespace("fp-a", "", "1", "lora")},
      {"same tokens, other model fingerprint", TestNamespace("fp-b", "lora", "1", "")},
      {"no adapter", TestNamespace("fp-a")},
  };
  for (const Case& k : cases) {
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(k.ns, base.tokens, 256, false));
    EXPECT_EQ(r.matched_tokens, 0u) << k.what;
    auto keys = ComputeChunkKeys(k.ns, base.tokens, 256, false).value();
    std::vector<StoredKey> stored;
    for (const auto& ck : keys) stored.push_back(ck.stored());
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(stored));
    for (const ChunkData& d : got) EXPECT_FALSE(d.found) << k.what;
  }
  ASSERT_OK_AND_ASSIGN(
      LookupResult r,
      store->Lookup(TestNamespace("fp-a", "lora", "1", ""), base.tokens, 256, false));
  EXPECT_EQ(r.matched_tokens, 768u);
}

TEST(StoreMemory, HybridLookupStopsAtLastStateAndStateRoundTrips) {
  auto store = MemoryStore();
  const Digest256 ns = TestNamespace();
  Chain c = MakeChain(ns, 21, 4, 500);
  // Real recurrent-state records (EncodeStateRecord) at the ends of chunks 0 and 2.
  std::vector<std::vector<uint8_t>> records;
  for (uint32_t boundary : {256u, 768u}) {
    RecurrentState st;
    st.boundary_tokens = boundary;
    for (int layer = 0; layer < 3; ++layer) {
      StateTensor t;
      t.name = "layers." + std::to_string(layer) + ".delta_state";
      t.dtype = DType::kF32;
      t.shape = {2, 8, 8};
      t.data = Bytes(boundary + layer, 2 * 8 * 8 * 4);
      st.tensors.push_back(t);
    }
    Digest256 fp{};
    fp[0] = 1;
    records.push_back(EncodeStateRecord(st, fp).value());
  }
  c.states[0] = records[0];
  c.states[2] = records[1];
  ASSERT_OK(store->Put(c.Puts()));
  ASSERT_OK_AND_ASSIGN(LookupResult full, store->Lookup(ns, c.tokens, 256, false));
  EXPECT_EQ(full.matched_tokens, 1024u);
  ASSERT_OK_AND_ASSIGN(LookupResult hybrid, store->Lookup(ns, c.tokens, 256, true));
  EXPECT_EQ(hybrid.matched_tokens, 768u);  // chunk 3 has no state: resume at 768
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
  EXPECT_TRUE(Same(got[0].state_bytes(), records[0]));
  EXPECT_FALSE(got[1].state);
  EXPECT_TRUE(Same(got[2].state_bytes(), records[1]));
  ASSERT_OK_AND_ASSIGN(DecodedStateRecord back, DecodeStateRecord(got[2].state_bytes()));
  EXPECT_EQ(back.state.boundary_tokens, 768u);
  EXPECT_EQ(back.state.tensors[1].data, Bytes(768 + 1, 2 * 8 * 8 * 4));
  // Only chunk 1 stored with a state: a hybrid lookup of a chain without any state at
  // its first chunk matches nothing.
  const Chain bare = MakeChain(ns, 22, 2, 100);
  ASSERT_OK(store->Put(bare.Puts()));
  ASSERT_OK_AND_ASSIGN(hybrid, store->Lookup(ns, bare.tokens, 256, true));
  EXPECT_EQ(hybrid.matched_tokens, 0u);
}

TEST(StoreMemory, TailOfAChainIsEvictedFirstAndPinsAreExempt) {
  // Budget for exactly four 1000-byte chunks.
  auto store = MemoryStore(4000);
  const Digest256 ns = TestNamespace();
  Chain a = MakeChain(ns, 31, 4, 1000);
  for (auto& p : a.payloads) p.resize(1000);
  ASSERT_OK(store->Put(a.Puts()));
  Chain b = MakeChain(ns, 32, 2, 1000);
  for (auto& p : b.payloads) p.resize(1000);
  ASSERT_OK(store->Put(b.Puts(0, 1)));  // one chunk of room needed: A loses its tail
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(a.stored(), false));
  EXPECT_EQ(r.keys.size(), 3u);
  // Pin A's remaining three chunks: the next Put must evict B's chunk, not A's.
  auto pinned = std::vector<StoredKey>(r.keys.begin(), r.keys.end());
  ASSERT_OK_AND_ASSIGN(uint64_t n, store->Pin(pinned));
  EXPECT_EQ(n, 3u);
  Chain c = MakeChain(ns, 33, 1, 1000);
  c.payloads[0].resize(1000);
  ASSERT_OK(store->Put(c.Puts()));
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(a.stored(), false));
  EXPECT_EQ(r.keys.size(), 3u);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(b.stored(), false));
  EXPECT_EQ(r.keys.size(), 0u);
  // Everything else pinned too: no room left for a new chunk.
  ASSERT_OK(store->Pin(c.stored()));
  Chain d = MakeChain(ns, 34, 1, 1000);
  d.payloads[0].resize(1000);
  EXPECT_STATUS(store->Put(d.Puts()), kResourceExhausted);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(d.stored(), false));
  EXPECT_EQ(r.keys.size(), 0u);
  // Unpinning A lets it go again, tail first.
  ASSERT_OK(store->Unpin(pinned));
  ASSERT_OK(store->Put(d.Puts()));
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(a.stored(), false));
  EXPECT_EQ(r.keys.size(), 2u);
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.tiers[0].evictions, 3u);
  EXPECT_EQ(s.pinned_entries, 1u);
  EXPECT_LE(s.tiers[0].bytes, 4000u);
}

TEST(StoreMemory, FrequentlyHitChunksSurviveEviction) {
  StoreOptions o;
  o.memory_budget_bytes = 10 * 500;
  o.eviction_samples = 64;  // examine every candidate: deterministic
  auto store = Store::Open(o).value();
  const Digest256 ns = TestNamespace();
  std::vector<Chain> chains;
  for (int i = 0; i < 10; ++i) {
    chains.push_back(MakeChain(ns, 40 + i, 1, 490));
    ASSERT_OK(store->Put(chains.back().Puts()));
  }
  for (int h = 0; h < 200; ++h) ASSERT_OK(store->Get(chains[3].stored()));
  for (int i = 0; i < 30; ++i) {
    Chain c = MakeChain(ns, 100 + i, 1, 490);
    ASSERT_OK(store->Put(c.Puts()));
  }
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(chains[3].stored(), false));
  EXPECT_EQ(r.keys.size(), 1u);
}

TEST(StoreMemory, DeleteRemovesDescendantsAcrossBranches) {
  auto store = MemoryStore();
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 51, 4, 100);
  ASSERT_OK(store->Put(a.Puts()));
  // A branch off A's second chunk.
  std::vector<uint32_t> tokens(a.tokens.begin(), a.tokens.begin() + 512);
  tokens.resize(1024, 99);
  auto bkeys = ComputeChunkKeys(ns, tokens, 256, false).value();
  std::vector<uint8_t> payload = Bytes(5, 100);
  std::vector<PutChunk> bputs;
  for (size_t i = 2; i < 4; ++i) {
    PutChunk p;
    p.key = bkeys[i].stored();
    p.has_parent = true;
    p.parent = bkeys[i - 1].stored();
    p.tokens = 256;
    p.payload = payload;
    bputs.push_back(p);
  }
  ASSERT_OK(store->Put(bputs));
  EXPECT_EQ(store->Stats().index_entries, 6u);
  const StoredKey second = a.keys[1].stored();
  ASSERT_OK_AND_ASSIGN(uint64_t removed, store->Delete(std::span(&second, 1)));
  EXPECT_EQ(removed, 5u);  // A[1..3] and the branch's two chunks
  ASSERT_OK_AND_ASSIGN(uint64_t again, store->Delete(std::span(&second, 1)));
  EXPECT_EQ(again, 0u);
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, tokens, 256, false));
  EXPECT_EQ(r.matched_tokens, 256u);
  EXPECT_EQ(store->Stats().tiers[0].bytes, a.payloads[0].size());
}

TEST(StoreMemory, ReaderKeepsCompleteBytesWhileTheEntryIsDeletedAndEvicted) {
  auto store = MemoryStore(3000);
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 61, 1, 2000);
  ASSERT_OK(store->Put(a.Puts()));
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(a.stored()));
  ASSERT_TRUE(got[0].found);
  // Evict it (a Put that needs the room), then delete whatever remains.
  const Chain b = MakeChain(ns, 62, 1, 2000);
  ASSERT_OK(store->Put(b.Puts()));
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(a.stored(), false));
  EXPECT_EQ(r.keys.size(), 0u);
  ASSERT_OK(store->Delete(b.stored()));
  EXPECT_TRUE(Same(got[0].payload_bytes(), a.payloads[0]));
}

TEST(StoreMemory, ConcurrentReadersSeeWholeVersionsOnly) {
  auto store = MemoryStore(1 << 20);
  const Digest256 ns = TestNamespace();
  const Chain c = MakeChain(ns, 71, 3, 4000);
  Chain v2 = c;  // same keys, other bytes: an overwrite by a lossy re-encode
  for (size_t i = 0; i < v2.payloads.size(); ++i) v2.payloads[i] = Bytes(900 + i, 3000);
  ASSERT_OK(store->Put(c.Puts()));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        auto got = store->Get(c.stored());
        if (!got.ok()) {
          ++bad;
          continue;
        }
        for (size_t i = 0; i < got->size(); ++i) {
          const ChunkData& d = (*got)[i];
          if (d.found && !Same(d.payload_bytes(), c.payloads[i]) &&
              !Same(d.payload_bytes(), v2.payloads[i])) {
            ++bad;
          }
        }
        auto r = store->Lookup(c.stored(), false);
        if (!r.ok()) ++bad;
        ++reads;
      }
    });
  }
  // At least 400 rounds, and on until the readers (who may start late on a busy
  // machine) have read 200 times.
  for (int round = 0; round < 400 || reads < 200; ++round) {
    ASSERT_OK(store->Put((round % 2 ? v2 : c).Puts()));
    if (round % 3 == 0) ASSERT_OK(store->Delete(c.stored()));
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
}

TEST(StoreMemory, IndexStaysInBudgetUnderAMillionRandomPrefixes) {
  StoreOptions o;
  o.memory_budget_bytes = 1ull << 30;
  o.index_budget_bytes = 8ull << 20;
  auto store = Store::Open(o).value();
  std::mt19937_64 rng(81);
  std::vector<uint8_t> payload = Bytes(1, 16);
#if defined(__SANITIZE_ADDRESS__)
  const uint64_t n = 300'000;  // still ~6x what the budget holds; ASan is ~15x slower
#else
  const uint64_t n = 1'000'000;
#endif
  for (uint64_t i = 0; i < n; ++i) {
    PutChunk p;
    for (size_t b = 0; b < 16; b += 8) {
      const uint64_t v = rng();
      std::memcpy(p.key.data() + b, &v, 8);
    }
    p.tokens = 256;
    p.payload = payload;
    ASSERT_OK(store->Put(std::span(&p, 1)));
  }
  const StoreStats s = store->Stats();
  EXPECT_LE(s.index_bytes, o.index_budget_bytes);
  EXPECT_GT(s.index_entries, 40000u);
  EXPECT_EQ(s.index_entries + s.index_evictions, n);
  EXPECT_EQ(s.tiers[0].entries, s.index_entries);
  std::cout << "index: " << s.index_entries << " entries in " << s.index_bytes << " bytes ("
            << s.index_bytes / s.index_entries << " bytes/entry)\n";
}

}  // namespace
}  // namespace kvstash::store::testing
