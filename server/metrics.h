// Server metrics: per-opcode request counts, errors and latency histograms, lookup hit
// accounting, bytes raw vs stored per codec, connection counters. Rendered as
// Prometheus text (/metrics, exposition format 0.0.4) and as JSON (/v1/stats, STATS).
//
// Histograms have fixed bucket bounds: latency in microseconds (kLatencyBoundsUs),
// request memory in bytes (kMemoryBoundsBytes); percentiles are estimated by linear
// interpolation inside the bucket holding the rank, as Prometheus' histogram_quantile
// does, then clamped to the smallest and largest value recorded (an estimate never
// exceeds what was seen).
//
// Request memory (docs/protocol.md §5.7): per PUT stored and per GET hit served, the
// payload bytes, the bytes of positions kept uncompressed inside the payload
// (server/payload_memory.h), the state record bytes, and their total payload + state
// (histogram).
//
// Thread-safety: every counter is a relaxed atomic; Record*/Add* may run concurrently
// from any thread; renders read a slightly racy but monotone view.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chunk_store.h"
#include "protocol/frame.h"

namespace kvstash::server {

inline constexpr std::array<uint64_t, 18> kLatencyBoundsUs = {
    25,    50,    100,    200,    500,    1000,   2000,    5000,    10000,
    20000, 50000, 100000, 200000, 500000, 1000000, 2000000, 5000000, 10000000};

// Request memory buckets: 1 KiB .. 4 GiB in powers of 4.
inline constexpr std::array<uint64_t, 12> kMemoryBoundsBytes = {
    1ull << 10, 1ull << 12, 1ull << 14, 1ull << 16, 1ull << 18, 1ull << 20,
    1ull << 22, 1ull << 24, 1ull << 26, 1ull << 28, 1ull << 30, 1ull << 32};

// A histogram over the upper bounds `kBounds` (ascending; values above the last go
// to the +Inf bucket). Thread-safe (relaxed atomics).
template <const auto& kBounds>
class Histogram {
 public:
  void Record(uint64_t v) {
    const auto it = std::lower_bound(kBounds.begin(), kBounds.end(), v);
    buckets_[it - kBounds.begin()].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
    for (uint64_t m = min_.load(std::memory_order_relaxed);
         v < m && !min_.compare_exchange_weak(m, v, std::memory_order_relaxed);) {
    }
    for (uint64_t m = max_.load(std::memory_order_relaxed);
         v > m && !max_.compare_exchange_weak(m, v, std::memory_order_relaxed);) {
    }
  }
  struct View {
    std::array<uint64_t, kBounds.size() + 1> buckets{};  // last: +Inf
    uint64_t count = 0;
    uint64_t sum = 0;
    uint64_t min = 0, max = 0;  // smallest and largest value recorded (0 when empty)
    // Estimated q-quantile (0 when empty), within [min, max]. REQUIRES: 0 <= q <= 1.
    double Quantile(double q) const {
      if (count == 0) return 0;
      return std::clamp(Interpolated(q), static_cast<double>(min), static_cast<double>(max));
    }

   private:
    double Interpolated(double q) const {
      const double rank = q * static_cast<double>(count);
      uint64_t seen = 0;
      for (size_t i = 0; i < buckets.size(); ++i) {
        if (buckets[i] == 0) continue;
        if (static_cast<double>(seen + buckets[i]) >= rank) {
          const double lo = i == 0 ? 0.0 : static_cast<double>(kBounds[i - 1]);
          if (i == kBounds.size()) return lo;  // +Inf bucket: its lower bound
          const double hi = static_cast<double>(kBounds[i]);
          const double frac = (rank - static_cast<double>(seen)) / static_cast<double>(buckets[i]);
          return lo + (hi - lo) * std::clamp(frac, 0.0, 1.0);
        }
        seen += buckets[i];
      }
      return static_cast<double>(kBounds.back());
    }
  };
  View Read() const {
    View v;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      v.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
      v.count += v.buckets[i];
    }
    v.sum = sum_.load(std::memory_order_relaxed);
    if (v.count > 0) {
      v.min = min_.load(std::memory_order_relaxed);
      v.max = max_.load(std::memory_order_relaxed);
      if (v.min > v.max) v.min = v.max;  // a racing first Record: keep the range valid
    }
    return v;
  }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> min_{UINT64_MAX};
  std::atomic<uint64_t> max_{0};
};
using LatencyHistogram = Histogram<kLatencyBoundsUs>;
using MemoryHistogram = Histogram<kMemoryBoundsBytes>;

// What one request weighs (docs/protocol.md §5.7).
struct RequestMemory {
  uint64_t payload_bytes = 0;       // whole payload, header included
  uint64_t raw_position_bytes = 0;  // part of payload_bytes: positions kept uncompressed
  uint64_t state_bytes = 0;         // recurrent-state record (0: none)
  uint64_t total() const { return payload_bytes + state_bytes; }
};

// Codec ids tracked separately (CodecId values 0..7).
inline constexpr int kTrackedCodecs = 8;

// The headline traffic counters of one Metrics, summed over opcodes and codecs: what
// the per-tenant families and the dashboard's per-tenant hit rate need.
struct TrafficTotals {
  uint64_t requests = 0, errors = 0;               // all opcodes
  uint64_t tokens_requested = 0, tokens_hit = 0;   // LOOKUP
  uint64_t put_raw_bytes = 0, put_stored_bytes = 0;  // PUT, all codecs
  uint64_t get_bytes = 0;                          // GET hits, payload bytes sent
  double hit_rate() const {
    return tokens_requested ? static_cast<double>(tokens_hit) / tokens_requested : 0.0;
  }
};

// The per-tenant Prometheus families, one sample per tenant and family:
// kvstash_tenant_requests_total, kvstash_tenant_request_errors_total,
// kvstash_tenant_lookup_tokens_{requested,hit}_total, kvstash_tenant_put_{raw,stored}_bytes_total,
// kvstash_tenant_get_bytes_total, each labelled {tenant="NAME"} (label value escaped
// as the exposition format requires: backslash, double quote, newline).
std::string RenderTenantPrometheus(const std::vector<std::pair<std::string, TrafficTotals>>& tenants);

class Metrics {
 public:
  // One finished request of `op` taking `micros`; `ok` false counts an error.
  void RecordRequest(protocol::Opcode op, uint64_t micros, bool ok);
  // One LOOKUP: chunks and tokens asked, and matched.
  void RecordLookup(uint64_t chunks, uint64_t tokens, uint64_t hit_chunks, uint64_t hit_tokens);
  // One stored PUT of `codec`: decoded KV bytes and bytes as stored.
  void RecordPut(uint16_t codec, uint64_t raw_bytes, uint64_t stored_bytes);
  // One GET hit of `bytes` payload bytes sent.
  void RecordGetHit(uint64_t bytes);
  // Request memory of one stored PUT (op kPut) or one GET hit served (op kGet).
  void RecordMemory(protocol::Opcode op, const RequestMemory& m);
  void RecordGetMiss() { get_misses_.fetch_add(1, std::memory_order_relaxed); }
  // A GET answered Corruption: the stored chunk failed its checksum (and was dropped),
  // or its payload is bound to another key.
  void RecordGetCorrupt() { get_corrupt_.fetch_add(1, std::memory_order_relaxed); }
  // A PUT payload rejected because a digest or header check failed.
  void RecordPayloadRejected() { payload_rejected_.fetch_add(1, std::memory_order_relaxed); }
  void RecordBadFrame() { bad_frames_.fetch_add(1, std::memory_order_relaxed); }
  void RecordAuthFailure() { auth_failures_.fetch_add(1, std::memory_order_relaxed); }
  void RecordTimeout() { timeouts_.fetch_add(1, std::memory_order_relaxed); }
  void ConnectionOpened() {
    open_.fetch_add(1, std::memory_order_relaxed);
    accepted_.fetch_add(1, std::memory_order_relaxed);
  }
  void ConnectionClosed() { open_.fetch_sub(1, std::memory_order_relaxed); }
  void ConnectionRejected() { rejected_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t open_connections() const { return open_.load(std::memory_order_relaxed); }
  void AddBytesIn(uint64_t n) { bytes_in_.fetch_add(n, std::memory_order_relaxed); }
  void AddBytesOut(uint64_t n) { bytes_out_.fetch_add(n, std::memory_order_relaxed); }
  // The headline counters (a slightly racy but monotone view, like the renders).
  TrafficTotals Totals() const;

  // Prometheus text exposition (with the store's occupancy).
  std::string RenderPrometheus(const StoreSnapshot& store) const;
  // The /v1/stats document (docs/protocol.md §8), "scope": "server".
  nlohmann::json RenderJson(const StoreSnapshot& store, const std::string& server_id) const;
  // A tenant's STATS document: only the traffic counters (requests, lookup, codecs,
  // bytes_*, get, payload_rejected) of a Metrics that recorded that tenant's requests
  // alone, "scope": "tenant"; nothing about the store, connections or other tenants.
  nlohmann::json RenderTenantJson(const std::string& tenant, const std::string& server_id) const;

 private:
  void RenderTraffic(nlohmann::json* out) const;
  using Counter = std::atomic<uint64_t>;

 public:
  struct Scalar;  // one value shown by both renderings (metrics.cc)

 private:
  std::vector<Scalar> TrafficScalars() const;
  std::vector<Scalar> ServerScalars(const StoreSnapshot& store) const;
  struct Op {
    Counter requests{0}, errors{0};
    LatencyHistogram latency;
  };
  std::array<Op, protocol::kNumOpcodes> ops_;
  Counter lookups_{0}, lookup_chunks_{0}, lookup_tokens_{0}, lookup_hit_chunks_{0},
      lookup_hit_tokens_{0};
  std::array<Counter, kTrackedCodecs> put_chunks_{}, put_raw_bytes_{}, put_stored_bytes_{};
  Counter get_hits_{0}, get_misses_{0}, get_corrupt_{0}, get_bytes_{0};
  Counter payload_rejected_{0}, bad_frames_{0}, auth_failures_{0}, timeouts_{0};
  Counter open_{0}, accepted_{0}, rejected_{0};
  Counter bytes_in_{0}, bytes_out_{0};
  struct Memory {
    Counter requests{0}, payload_bytes{0}, raw_position_bytes{0}, state_bytes{0},
        state_records{0};
    MemoryHistogram total;
  };
  Memory put_memory_, get_memory_;
  struct MemoryField;
  static const MemoryField kMemoryFields[];
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace kvstash::server
