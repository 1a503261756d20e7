// RequestHandler: turns one complete request frame into its reply frame. No sockets,
// no threads of its own: the connection code (connection.h) calls it, HELLO on the
// connection's strand and everything else on a worker thread.
//
// Rules it enforces (docs/protocol.md §4-§5):
// - HELLO binds the connection to a tenant (constant-time credential check); any
//   request but PING and HELLO before a successful HELLO is PermissionDenied, and a
//   failed HELLO closes the connection.
// - Every key is scoped by the tenant (tenants.h) before it reaches the store.
// - PUT payloads are validated before they are stored: header CRC, body XXH3, layout,
//   size; raw KV (kPutFlagRawKv) must be a codec-kRaw payload whose body is exactly the
//   canonical chunk with a matching content checksum, and is then encoded with the
//   requested codec (raw, or dckv with the tenant's artifact: tenant_codecs.h; spec
//   and others NotSupported). State records must parse (DecodeStateRecord).
// - GET with kGetFlagDecoded returns a codec-kRaw payload, decoding dckv payloads of
//   the tenant's artifact on the CPU (others NotSupported, tenant_codecs.h).
//
// Metrics are recorded server-wide and per tenant: the STATS opcode answers a tenant
// with its own traffic only; /v1/stats (HTTP, operators) is server-wide.
//
// Thread-safety: Handle may run concurrently for different frames; the handler's
// collaborators are thread-safe (ChunkStore, Metrics) or immutable (TenantTable).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/chunk_store.h"
#include "server/metrics.h"
#include "protocol/frame.h"
#include "server/tenant_codecs.h"
#include "server/tenants.h"

namespace kvstash::server {

// A reply frame ready to send: `head`, then the bytes of `shared` (when set), then
// `tail`. A GET reply references the store's immutable payload buffer instead of
// copying it into the frame.
struct Reply {
  std::vector<uint8_t> head;
  SharedBytes shared;
  std::vector<uint8_t> tail;

  size_t size() const { return head.size() + (shared ? shared->size() : 0) + tail.size(); }
  // The frame as one buffer (tests, logs).
  std::vector<uint8_t> Flatten() const;
};

struct HandlerLimits {
  std::string server_id;
  uint32_t max_frame_bytes = 0;
  uint32_t max_in_flight = 0;
};

class RequestHandler {
 public:
  // The pointers must outlive the handler.
  // `codecs`: server-side codecs per tenant (null: raw only).
  RequestHandler(ChunkStore* store, const TenantTable* tenants, Metrics* metrics,
                 HandlerLimits limits, const TenantCodecs* codecs = nullptr);

  // Handles a HELLO frame; appends the reply to `out`. On success sets *tenant and
  // returns true; on failure appends an error reply and returns false (close after
  // sending it).
  bool HandleHello(const protocol::Frame& request, std::string* tenant,
                   std::vector<uint8_t>* out);

  // Handles any other request for `tenant` (empty: no HELLO yet).
  Reply Handle(const std::string& tenant, const protocol::Frame& request);

  // True for requests cheap enough to answer on a socket thread (PING; LOOKUP when the
  // store's lookups are in memory): no hop to the worker pool and back.
  bool RunsInline(const protocol::FrameHeader& h) const;

  // The /v1/stats document (operators: server-wide), with "tenants": {name: {requests,
  // errors, tokens_requested, tokens_hit, hit_rate, put_raw_bytes, put_stored_bytes,
  // get_bytes}} for every configured tenant (docs/protocol.md §8).
  nlohmann::json StatsJson() const;
  // Every configured tenant's headline counters, in name order.
  std::vector<std::pair<std::string, TrafficTotals>> TenantTotals() const;
  // The STATS reply of `tenant`: that tenant's traffic only (Metrics::RenderTenantJson).
  nlohmann::json TenantStatsJson(const std::string& tenant) const;
  // /metrics: the server-wide families, then the per-tenant ones (RenderTenantPrometheus).
  std::string PrometheusText() const;
  // Degraded parts for /healthz, one line each ("T2 down: ..."); empty when none.
  std::string HealthDetail() const;

 private:
  Result<std::vector<uint8_t>> Dispatch(const std::string& tenant, const protocol::Frame& f);
  Result<std::vector<uint8_t>> DoLookup(const std::string& tenant, const protocol::Frame& f);
  Result<std::vector<uint8_t>> DoPut(const std::string& tenant, const protocol::Frame& f);
  Result<Reply> DoGet(const std::string& tenant, const protocol::Frame& f);
  Result<std::vector<uint8_t>> DoDelete(const std::string& tenant, const protocol::Frame& f);
  Result<std::vector<uint8_t>> DoPin(const std::string& tenant, const protocol::Frame& f);

  // Runs f on the server-wide metrics and on `tenant`'s (when it is a known tenant).
  template <typename F>
  void Record(const std::string& tenant, F f) {
    f(*metrics_);
    if (auto it = tenant_metrics_.find(tenant); it != tenant_metrics_.end()) f(*it->second);
  }

  ChunkStore* store_;
  const TenantTable* tenants_;
  Metrics* metrics_;
  const HandlerLimits limits_;
  const TenantCodecs* codecs_;
  // One Metrics per configured tenant (the set is fixed: the map is read-only after
  // construction, the counters are atomics).
  std::map<std::string, std::unique_ptr<Metrics>, std::less<>> tenant_metrics_;
};

}  // namespace kvstash::server
