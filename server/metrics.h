// Server metrics: per-opcode request counts, errors and latency histograms, lookup hit
// accounting, bytes raw vs stored per codec, connection counters. Rendered as
// Prometheus text (/metrics, exposition format 0.0.4) and as JSON (/v1/stats, STATS).
//
// Latency histograms have fixed bucket bounds in microseconds (kLatencyBoundsUs);
// percentiles are estimated by linear interpolation inside the bucket holding the
// rank, as Prometheus' histogram_quantile does.
//
// Thread-safety: every counter is a relaxed atomic; Record*/Add* may run concurrently
// from any thread; renders read a slightly racy but monotone view.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/chunk_store.h"
#include "server/protocol/frame.h"

namespace kvstash::server {

inline constexpr std::array<uint64_t, 18> kLatencyBoundsUs = {
    25,    50,    100,    200,    500,    1000,   2000,    5000,    10000,
    20000, 50000, 100000, 200000, 500000, 1000000, 2000000, 5000000, 10000000};

class LatencyHistogram {
 public:
  void Record(uint64_t micros);
  struct View {
    std::array<uint64_t, kLatencyBoundsUs.size() + 1> buckets{};  // last: +Inf
    uint64_t count = 0;
    uint64_t sum_us = 0;
    // Estimated q-quantile in microseconds (0 when empty). REQUIRES: 0 <= q <= 1.
    double Quantile(double q) const;
  };
  View Read() const;

 private:
  std::array<std::atomic<uint64_t>, kLatencyBoundsUs.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_us_{0};
};

// Codec ids tracked separately (CodecId values 0..7).
inline constexpr int kTrackedCodecs = 8;

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
  void RecordGetMiss() { get_misses_.fetch_add(1, std::memory_order_relaxed); }
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
  struct Op {
    Counter requests{0}, errors{0};
    LatencyHistogram latency;
  };
  std::array<Op, protocol::kNumOpcodes> ops_;
  Counter lookups_{0}, lookup_chunks_{0}, lookup_tokens_{0}, lookup_hit_chunks_{0},
      lookup_hit_tokens_{0};
  std::array<Counter, kTrackedCodecs> put_chunks_{}, put_raw_bytes_{}, put_stored_bytes_{};
  Counter get_hits_{0}, get_misses_{0}, get_bytes_{0};
  Counter payload_rejected_{0}, bad_frames_{0}, auth_failures_{0}, timeouts_{0};
  Counter open_{0}, accepted_{0}, rejected_{0};
  Counter bytes_in_{0}, bytes_out_{0};
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace kvstash::server
