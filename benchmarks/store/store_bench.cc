// Micro-benchmarks of the store's hot paths: chained key hashing, index lookups, and
// Store::Lookup on the in-memory tier. The end-to-end table is `kvstash-bench store`.
#include <benchmark/benchmark.h>

#include <random>

#include "common/byte_io.h"
#include "kvstash/prefix_key.h"
#include "store/prefix_index.h"
#include "store/store.h"

namespace kvstash::store {
namespace {

Digest256 Ns() {
  Namespace spec;
  spec.model_fingerprint = "bench";
  spec.layout = {30, 3, 64, DType::kBF16};
  return NamespaceDigest(spec).value();
}

std::vector<uint32_t> Tokens(size_t n) {
  std::mt19937_64 rng(1);
  std::vector<uint32_t> t(n);
  for (uint32_t& x : t) x = static_cast<uint32_t>(rng() % 49152);
  return t;
}

void BM_ComputeChunkKeys(benchmark::State& state) {
  const Digest256 ns = Ns();
  const auto tokens = Tokens(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    auto keys = ComputeChunkKeys(ns, tokens, 256, false);
    benchmark::DoNotOptimize(keys);
  }
  state.counters["ns_per_token"] = benchmark::Counter(
      static_cast<double>(state.range(0)) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ComputeChunkKeys)->Arg(1024)->Arg(32768)->Arg(131072);

void BM_IndexFind(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  PrefixIndex index(PrefixIndex::MaxBytesForEntries(n), EvictionPolicy::kLfuDecay, 16, 4096, 1,
                    false);
  std::mt19937_64 rng(2);
  std::vector<StoredKey> keys(n);
  for (auto& k : keys) {
    StoreLe<uint64_t>(k.data(), rng());
    StoreLe<uint64_t>(k.data() + 8, rng());
    index.Insert(k, kNoEntry, kInT0);
  }
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(index.Find(keys[i]));
    i = (i + 7919) % n;
  }
}
BENCHMARK(BM_IndexFind)->Arg(1 << 10)->Arg(1 << 20);

void BM_StoreLookupKeys(benchmark::State& state) {
  StoreOptions o;
  auto st = Store::Open(o).value();
  const auto tokens = Tokens(static_cast<size_t>(state.range(0)));
  auto keys = ComputeChunkKeys(Ns(), tokens, 256, false).value();
  const std::vector<uint8_t> payload(64, 1);
  std::vector<PutChunk> puts;
  std::vector<StoredKey> stored;
  for (size_t i = 0; i < keys.size(); ++i) {
    PutChunk p;
    p.key = keys[i].stored();
    p.has_parent = i > 0;
    if (i > 0) p.parent = keys[i - 1].stored();
    p.tokens = 256;
    p.payload = payload;
    puts.push_back(p);
    stored.push_back(p.key);
  }
  if (!st->Put(puts).ok()) state.SkipWithError("put failed");
  for (auto _ : state) {
    auto r = st->Lookup(stored, false);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_StoreLookupKeys)->Arg(32768)->Arg(131072);

}  // namespace
}  // namespace kvstash::store
