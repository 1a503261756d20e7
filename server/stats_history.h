// The server's own history of its headline numbers (GET /v1/history), so that a
// dashboard opened now shows the last hour of hit rate and occupancy, not only what it
// polled since it opened.
//
// Every `interval_ms` the server records one sample taken from its /v1/stats document;
// the newest `capacity` samples are kept (oldest dropped first). A sample holds
// cumulative counters (rates are differences of two samples, computed by the reader):
//   {"t_ms": unix time in ms,
//    "tokens_requested", "tokens_hit", "requests", "errors",
//    "bytes_raw", "bytes_stored", "bytes_saved",
//    "tiers": {NAME: {"bytes", "budget_bytes", "entries"}}   (enabled tiers only),
//    "tenants": {NAME: {"tokens_requested", "tokens_hit", "requests", "errors"}}}
// Render() answers {"interval_ms": I, "capacity": N, "samples": [oldest .. newest]}.
// Memory: about 200 bytes plus 80 per tenant per sample (720 samples of 4 tenants:
// ~0.4 MB).
//
// Thread-safety: Record and Render may run concurrently from any thread (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include <nlohmann/json.hpp>

#include "common/thread_annotations.h"

namespace kvstash::server {

class StatsHistory {
 public:
  // REQUIRES: capacity >= 1.
  StatsHistory(size_t capacity, uint32_t interval_ms);

  // Appends the sample of `stats` (a RequestHandler::StatsJson document; missing
  // fields read as 0) taken at `unix_ms`, dropping the oldest when full.
  void Record(int64_t unix_ms, const nlohmann::json& stats);

  // The /v1/history document (see the file comment).
  nlohmann::json Render() const;

  size_t size() const;

 private:
  const size_t capacity_;
  const uint32_t interval_ms_;
  mutable Mutex mu_;
  std::deque<nlohmann::json> samples_ KVSTASH_GUARDED_BY(mu_);
};

}  // namespace kvstash::server
