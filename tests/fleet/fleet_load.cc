#include "tests/fleet/fleet_load.h"

#include <cstdio>

#include "tests/server/test_payloads.h"
#include "tests/store/store_test_util.h"

namespace kvstash::testing {
namespace {

// SmolLM2-135M's KV shape: 30 layers, 3 KV heads, head_dim 64, bf16.
KvLayout SmolLm2Layout() { return KvLayout{30, 3, 64, DType::kBF16}; }

void Count(LoadCounts* c, std::chrono::steady_clock::time_point t0, const Status& s,
           const char* what) {
  const auto us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                            std::chrono::steady_clock::now() - t0)
                                            .count());
  c->requests++;
  uint64_t seen = c->max_latency_us.load();
  while (us > seen && !c->max_latency_us.compare_exchange_weak(seen, us)) {
  }
  if (!s.ok() && !s.IsNotFound()) {
    c->errors++;
    if (c->first_error_logged.fetch_add(1) < 5) {
      std::fprintf(stderr, "fleet load: %s failed: %s\n", what, s.ToString().c_str());
    }
  }
}

}  // namespace

std::vector<uint8_t> ExpectedPayload(const StoredKey& key) {
  return server::testing::Bound(server::testing::KeyedPayload(key, kChunkTokens, SmolLm2Layout()), key);
}

std::vector<FleetChain> MakeFleetChains(uint64_t seed, size_t n, size_t chunks) {
  std::vector<FleetChain> out(n);
  for (size_t c = 0; c < n; ++c) {
    for (size_t i = 0; i < chunks; ++i) {
      const std::vector<uint8_t> b =
          store::testing::Bytes(seed * 0x100000001B3ull + c * 1024 + i + 1, 16);
      StoredKey k{};
      std::copy(b.begin(), b.end(), k.begin());
      out[c].keys.push_back(k);
    }
  }
  return out;
}

std::string LoadCounts::ToString() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "requests=%llu hits=%llu misses=%llu refused=%llu errors=%llu wrong=%llu "
                "max_latency_ms=%.1f",
                static_cast<unsigned long long>(requests.load()),
                static_cast<unsigned long long>(hits.load()),
                static_cast<unsigned long long>(misses.load()),
                static_cast<unsigned long long>(refused.load()),
                static_cast<unsigned long long>(errors.load()),
                static_cast<unsigned long long>(wrong.load()), max_latency_us.load() / 1000.0);
  return buf;
}

size_t VisitChain(Client& client, const FleetChain& chain, bool put_missing,
                  const CallOptions& call, LoadCounts* counts) {
  std::vector<ChunkRef> refs;
  for (const StoredKey& k : chain.keys) refs.push_back({k, kChunkTokens});
  const StoredKey& route = chain.keys[0];
  auto t0 = std::chrono::steady_clock::now();
  Result<LookupResult> l = client.Lookup(refs, false, call);
  Count(counts, t0, l.status(), "LOOKUP");
  if (!l.ok()) return 0;
  size_t stored = 0;
  counts->misses += chain.keys.size() - l->matched_chunks;
  for (size_t i = 0; i < l->matched_chunks; ++i) {
    t0 = std::chrono::steady_clock::now();
    Result<GetResult> g = client.Get(route, chain.keys[i], {}, call);
    Count(counts, t0, g.status(), "GET");
    if (g.status().IsNotFound()) counts->misses++;
    if (!g.ok()) break;  // the rest of the run is re-put below
    if (g->payload != ExpectedPayload(chain.keys[i])) {
      counts->wrong++;
      break;
    }
    counts->hits++;
    ++stored;
  }
  if (!put_missing) return stored;
  for (size_t i = stored; i < chain.keys.size(); ++i) {
    PutChunk p;
    p.route = route;
    p.key = chain.keys[i];
    if (i > 0) p.parent = chain.keys[i - 1];
    p.payload = ExpectedPayload(chain.keys[i]);
    t0 = std::chrono::steady_clock::now();
    const Status s = client.Put(p, call);
    Count(counts, t0, s, "PUT");
    if (s.IsNotFound()) counts->refused++;
    if (!s.ok()) break;
    ++stored;
  }
  return stored;
}

std::vector<size_t> VisitAll(Client& client, const std::vector<FleetChain>& chains,
                             bool put_missing, int threads, const CallOptions& call,
                             LoadCounts* counts) {
  std::vector<size_t> stored(chains.size(), 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t step = static_cast<size_t>(threads);
      for (size_t c = static_cast<size_t>(t); c < chains.size(); c += step) {
        stored[c] = VisitChain(client, chains[c], put_missing, call, counts);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return stored;
}

LoadRun::LoadRun(Client& client, const std::vector<FleetChain>& chains, int threads,
                 const CallOptions& call, LoadCounts* counts) {
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([this, &client, &chains, threads, t, call, counts] {
      while (!stop_) {
        for (size_t c = static_cast<size_t>(t); c < chains.size() && !stop_;
             c += static_cast<size_t>(threads)) {
          VisitChain(client, chains[c], /*put_missing=*/true, call, counts);
          visits_++;
        }
      }
    });
  }
}

uint64_t LoadRun::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  return visits_.load();
}

}  // namespace kvstash::testing
