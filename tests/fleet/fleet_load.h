// FleetLoad: bounded, verifiable traffic for tests of several kvstash-server nodes.
//
// A chain is a few chunk keys (the first routes it, kvstash::Client's rendezvous
// hashing); every chunk's payload is KeyedPayload(key) bound to the key: SmolLM2-135M-
// shaped bf16 KV of kChunkTokens tokens (30 layers x 3 KV heads x 64 dims, 368,640 bytes
// of KV plus the 152-byte header) whose bytes are a function of the key alone, so a GET
// that returns any other chunk's bytes is counted as wrong KV.
//
// One visit of a chain = LOOKUP, GET of every matched chunk (each compared with its
// expected bytes), then (when asked) PUT of the chunks after the matched run. Outcomes
// are counted in LoadCounts:
//   hit      a GET returned the expected bytes
//   miss     a chunk LOOKUP did not match, or a GET answered NotFound
//   refused  a PUT answered NotFound: its parent is not on the node that got it (the
//            chain's earlier chunks went to another node across a failover): the
//            chain is not cached there, a miss for the cache, not a failure
//   error    any other non-Ok status (Unavailable, DeadlineExceeded, ...)
//   wrong    a GET returned bytes other than the expected ones (must stay 0)
// and the slowest call's latency.
//
// Thread-safety: LoadCounts is atomic; a LoadRun is driven from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "kvstash/client.h"

namespace kvstash::testing {

inline constexpr uint32_t kChunkTokens = 16;

// The payload of the chunk stored under `key` (see the file comment).
std::vector<uint8_t> ExpectedPayload(const StoredKey& key);

struct FleetChain {
  std::vector<StoredKey> keys;  // keys[0] routes the chain
};
// `n` chains of `chunks` chunks with keys derived from `seed` (distinct seeds give
// disjoint chains).
std::vector<FleetChain> MakeFleetChains(uint64_t seed, size_t n, size_t chunks);

struct LoadCounts {
  std::atomic<uint64_t> requests{0}, hits{0}, misses{0}, refused{0}, errors{0}, wrong{0};
  std::atomic<uint64_t> max_latency_us{0};
  std::atomic<uint64_t> first_error_logged{0};
  // "requests=... hits=... misses=... refused=... errors=... wrong=... max_latency_ms=..."
  std::string ToString() const;
};

// Visits `chain` once (see the file comment). Returns the number of its chunks stored
// on the fleet after the visit as far as this client saw (matched and verified, plus
// those put with Ok); chain.keys.size() means the chain is acknowledged whole.
size_t VisitChain(Client& client, const FleetChain& chain, bool put_missing,
                  const CallOptions& call, LoadCounts* counts);

// Visits every chain once, from `threads` threads; the VisitChain result per chain.
std::vector<size_t> VisitAll(Client& client, const std::vector<FleetChain>& chains,
                             bool put_missing, int threads, const CallOptions& call,
                             LoadCounts* counts);

// `threads` threads visiting `chains` (thread t takes chains t, t + threads, ...),
// round after round, until Stop(). Visits put missing chunks.
class LoadRun {
 public:
  LoadRun(Client& client, const std::vector<FleetChain>& chains, int threads,
          const CallOptions& call, LoadCounts* counts);
  ~LoadRun() { Stop(); }
  // Joins the threads (after their current visit). Returns the visits made.
  uint64_t Stop();

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> visits_{0};
  std::vector<std::thread> threads_;
};

}  // namespace kvstash::testing
