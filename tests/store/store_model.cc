#include "tests/store/store_model.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "common/byte_io.h"
#include "store/store.h"
#include "tests/store/store_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::store::testing {
namespace {

// The payload of a key is a function of the key (so any returned bytes can be
// checked), of 40..800 bytes.
std::vector<uint8_t> PayloadOf(const StoredKey& k) {
  const uint64_t h = LoadLe<uint64_t>(k.data());
  return Bytes(h, 40 + h % 761);
}
std::vector<uint8_t> StateOf(const StoredKey& k) {
  const uint64_t h = LoadLe<uint64_t>(k.data() + 8);
  if (h % 3 != 0) return {};
  return Bytes(h, 16 + h % 100);
}

struct ModelChain {
  std::vector<StoredKey> keys;
  std::vector<uint32_t> tokens;
};

}  // namespace

void RunStoreModel(const StoreOptions& options, const ModelRunOptions& run, bool reopen) {
  std::mt19937_64 rng(run.seed);
  const Digest256 ns = TestNamespace("model");
  // Chains: 12 base chains; the others share a random prefix of a base chain.
  std::vector<ModelChain> chains;
  std::vector<std::vector<uint32_t>> base_tokens;
  const uint32_t kC = 16;
  std::map<StoredKey, std::optional<StoredKey>> parent_of;
  for (int c = 0; c < run.chains; ++c) {
    std::vector<uint32_t> tokens(kC * run.max_chunks);
    for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 49152);
    if (c >= 12) {
      const auto& base = base_tokens[rng() % 12];
      const size_t shared = kC * (rng() % run.max_chunks);
      std::copy(base.begin(), base.begin() + shared, tokens.begin());
    } else {
      base_tokens.push_back(tokens);
    }
    ModelChain mc;
    const std::vector<ChunkKey> chunk_keys = ComputeChunkKeys(ns, tokens, kC, false).value();
    for (const ChunkKey& k : chunk_keys) mc.keys.push_back(k.stored());
    for (size_t i = 0; i < mc.keys.size(); ++i) {
      parent_of[mc.keys[i]] = i == 0 ? std::nullopt : std::optional(mc.keys[i - 1]);
    }
    chains.push_back(std::move(mc));
  }
  std::map<StoredKey, std::vector<StoredKey>> children_of;
  for (const auto& [k, p] : parent_of) {
    if (p) children_of[*p].push_back(k);
  }

  auto store = Store::Open(options).value();
  std::set<StoredKey> model;    // put and not deleted since (may have been evicted)
  std::set<StoredKey> pinned;   // pinned and present
  std::set<StoredKey> deleted;  // deleted and not put again

  auto present = [&](const StoredKey& k) {
    auto r = store->Lookup(std::span(&k, 1), false);
    return r.ok() && r->keys.size() == 1;
  };
  auto check_bytes = [&](const ChunkData& d) {
    ASSERT_TRUE(model.count(d.key)) << "returned a chunk that is not in the model";
    const std::vector<uint8_t> want = PayloadOf(d.key);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), d.payload_bytes().begin(),
                           d.payload_bytes().end()));
    const std::vector<uint8_t> want_state = StateOf(d.key);
    ASSERT_TRUE(std::equal(want_state.begin(), want_state.end(), d.state_bytes().begin(),
                           d.state_bytes().end()));
  };
  auto full_check = [&]() {
    const StoreStats s = store->Stats();
    for (int t = 0; t < kNumTiers; ++t) {
      if (s.enabled[t]) ASSERT_LE(s.tiers[t].bytes, s.tiers[t].budget_bytes) << "tier " << t;
    }
    ASSERT_LE(s.index_bytes, s.index_budget_bytes);
    ASSERT_EQ(s.pinned_entries, pinned.size());
    for (const StoredKey& k : pinned) ASSERT_TRUE(present(k)) << "a pinned chunk was evicted";
    for (const StoredKey& k : deleted) ASSERT_FALSE(present(k)) << "a deleted chunk is visible";
    for (const ModelChain& c : chains) {
      bool prev = true;
      for (const StoredKey& k : c.keys) {
        const bool p = present(k);
        if (p) {
          ASSERT_TRUE(model.count(k)) << "a chunk never put is visible";
          ASSERT_TRUE(prev) << "a chain kept a chunk after losing its parent (not tail-first)";
        }
        prev = p;
      }
    }
  };

  for (uint64_t op = 0; op < run.ops; ++op) {
    const ModelChain& c = chains[rng() % chains.size()];
    const int r = static_cast<int>(rng() % 100);
    if (r < 35) {  // Put a prefix of a chain
      const size_t m = 1 + rng() % c.keys.size();
      std::vector<std::vector<uint8_t>> payloads, states;
      std::vector<PutChunk> puts;
      for (size_t i = 0; i < m; ++i) {
        payloads.push_back(PayloadOf(c.keys[i]));
        states.push_back(StateOf(c.keys[i]));
      }
      for (size_t i = 0; i < m; ++i) {
        PutChunk p;
        p.key = c.keys[i];
        p.has_parent = i > 0;
        if (i > 0) p.parent = c.keys[i - 1];
        p.tokens = kC;
        p.payload = payloads[i];
        p.state = states[i];
        puts.push_back(p);
      }
      ASSERT_OK(store->Put(puts));
      for (size_t i = 0; i < m; ++i) {
        model.insert(c.keys[i]);
        deleted.erase(c.keys[i]);
      }
    } else if (r < 55) {  // Lookup agrees with Get, and every returned byte is right
      ASSERT_OK_AND_ASSIGN(LookupResult lr, store->Lookup(c.keys, false));
      ASSERT_LE(lr.keys.size(), c.keys.size());
      for (size_t i = 0; i < lr.keys.size(); ++i) {
        ASSERT_EQ(lr.keys[i], c.keys[i]);
        ASSERT_TRUE(model.count(c.keys[i]));
      }
      ASSERT_EQ(lr.matched_tokens, kC * lr.keys.size());
      ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.keys));
      size_t run_len = 0;
      while (run_len < got.size() && got[run_len].found) ++run_len;
      ASSERT_EQ(run_len, lr.keys.size());
      for (const ChunkData& d : got) {
        if (d.found) check_bytes(d);
        if (::testing::Test::HasFatalFailure()) return;
      }
    } else if (r < 75) {  // Get random keys
      std::vector<StoredKey> keys;
      for (int i = 0; i < 4; ++i) {
        const ModelChain& o = chains[rng() % chains.size()];
        keys.push_back(o.keys[rng() % o.keys.size()]);
      }
      ASSERT_OK_AND_ASSIGN(auto got, store->Get(keys));
      for (const ChunkData& d : got) {
        if (d.found) check_bytes(d);
        if (!d.found) ASSERT_FALSE(pinned.count(d.key)) << "pinned chunk missed";
        if (::testing::Test::HasFatalFailure()) return;
      }
    } else if (r < 78) {  // Delete a chain suffix (and every branch below it)
      const StoredKey k = c.keys[rng() % c.keys.size()];
      std::vector<StoredKey> stack{k};
      uint64_t in_model = 0;
      while (!stack.empty()) {
        const StoredKey x = stack.back();
        stack.pop_back();
        in_model += model.erase(x);
        pinned.erase(x);
        deleted.insert(x);
        for (const StoredKey& ch : children_of[x]) stack.push_back(ch);
      }
      ASSERT_OK_AND_ASSIGN(uint64_t removed, store->Delete(std::span(&k, 1)));
      ASSERT_LE(removed, in_model);
    } else if (r < 85) {  // Pin a present prefix (bounded so budgets stay meetable)
      if (pinned.size() < 8) {
        const size_t m = 1 + rng() % 2;
        std::vector<StoredKey> keys(c.keys.begin(), c.keys.begin() + m);
        std::vector<bool> was(m);
        for (size_t i = 0; i < m; ++i) was[i] = present(keys[i]);
        ASSERT_OK_AND_ASSIGN(uint64_t n, store->Pin(keys));
        uint64_t expect = 0;
        for (size_t i = 0; i < m; ++i) {
          if (was[i]) {
            ++expect;
            pinned.insert(keys[i]);
          }
        }
        ASSERT_EQ(n, expect);
      }
    } else if (r < 90) {  // Unpin
      if (!pinned.empty()) {
        auto it = pinned.begin();
        std::advance(it, static_cast<long>(rng() % pinned.size()));
        const StoredKey k = *it;
        ASSERT_OK_AND_ASSIGN(uint64_t n, store->Unpin(std::span(&k, 1)));
        ASSERT_EQ(n, 1u);
        pinned.erase(k);
      }
    } else {  // Hybrid lookups end at the last chunk with a state record
      ASSERT_OK_AND_ASSIGN(LookupResult a, store->Lookup(c.keys, false));
      ASSERT_OK_AND_ASSIGN(LookupResult b, store->Lookup(c.keys, /*require_state=*/true));
      ASSERT_LE(b.keys.size(), a.keys.size());
      if (!b.keys.empty()) ASSERT_FALSE(StateOf(b.keys.back()).empty());
      for (size_t i = b.keys.size(); i < a.keys.size(); ++i) {
        ASSERT_TRUE(StateOf(a.keys[i]).empty());
      }
    }
    if (::testing::Test::HasFatalFailure()) return;
    if (op % run.full_check_every == 0) {
      full_check();
      if (::testing::Test::HasFatalFailure()) return;
    }
    if (reopen && op > 0 && op % (run.ops / 4) == 0) {
      store.reset();
      store = Store::Open(options).value();
      full_check();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  full_check();
  ASSERT_OK_AND_ASSIGN(VerifyReport v, store->VerifyAll());
  EXPECT_EQ(v.dropped, 0u);
  EXPECT_EQ(v.verified, v.entries);
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.checksum_failures, 0u);
  uint64_t evictions = s.index_evictions;
  for (int t = 0; t < kNumTiers; ++t) evictions += s.tiers[t].evictions;
  EXPECT_GT(evictions, 0u) << "the budgets were meant to force evictions";
  std::cout << "model: " << run.ops << " ops, entries " << s.index_entries << ", evictions "
            << evictions << ", T0 bytes " << s.tiers[0].bytes << ", T1 bytes "
            << s.tiers[1].bytes << ", T2 bytes " << s.tiers[2].bytes << "\n";
}

}  // namespace kvstash::store::testing
