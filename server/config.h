// ServerConfig: everything `kvstash-server` reads at start-up, from a JSON file
// (--config FILE) with command-line flags overriding single fields. Every field has
// its default written down; none changes while the server runs (restart to change).
//
// File format (all keys optional; docs/protocol.md §7 has a full example):
//   { "listen": "0.0.0.0", "port": 7470, "http_listen": "127.0.0.1", "http_port": 7471,
//     "server_id": "node-1",
//     "io_threads": 2, "worker_threads": 2,
//     "limits": { "max_frame_bytes": ..., "max_in_flight": ..., "max_connections": ...,
//                 "idle_timeout_ms": ..., "io_timeout_ms": ..., "hello_timeout_ms": ...,
//                 "min_transfer_bytes_per_s": ... },
//     "drain_grace_ms": 0, "drain_timeout_ms": 5000,
//     "history_interval_ms": 5000, "history_points": 720,
//     "tenants": [ { "name": "team-a", "credential": "s3cret",
//                    "dckv_artifact": "dckv-g6-r8.kvda", "dckv_artifact_sha256": "<hex>" },
//                  { "name": "team-b", "credential_sha256": "<64 hex digits>" } ],
//     "tls": { "cert_file": "server.pem", "key_file": "server.key" },
//     "store": { "path": "/var/lib/kvstash", "memory_budget_bytes": 1073741824, ... },
//     "chart_js": "/usr/share/javascript/chart.js/chart.min.js",
//     "ready_file": "" }
// Unknown keys are errors (a typo must not silently fall back to a default).
//
// Thread-safety: a value; read-only after loading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/result.h"

namespace kvstash::server {

struct TenantConfig {
  std::string name;               // 1..255 bytes
  std::string credential;         // the secret in clear, or empty when ...
  std::string credential_sha256;  // ... its SHA-256 is given instead (64 hex digits)
  // Server-side dckv coding for this tenant (server/tenant_codecs.h): the artifact
  // file (`kvstash calibrate dckv`) and its SHA-256 (64 hex digits, required with it).
  // Default: none (PUT raw_kv to dckv and GET decoded of dckv are NotSupported).
  std::string dckv_artifact;
  std::string dckv_artifact_sha256;
};

struct Limits {
  // Largest frame body accepted (bytes). Default: 256 MiB.
  uint32_t max_frame_bytes = 256u << 20;
  // Requests a connection may have outstanding; the server stops reading a connection
  // that has this many until one is answered. Default: 64.
  uint32_t max_in_flight = 64;
  // Open protocol connections; one more is answered ResourceExhausted and closed.
  // Default: 4096.
  uint32_t max_connections = 4096;
  // A connection with no request in progress for this long is closed. Default: 60000.
  uint32_t idle_timeout_ms = 60000;
  // Deadline of each read or write once a frame has started (slow clients, slowloris).
  // Default: 10000.
  uint32_t io_timeout_ms = 10000;
  // Whole-frame deadlines (a client trickling bytes must not hold a connection open):
  // a request frame must arrive completely within io_timeout_ms of its first byte plus
  // body_bytes / min_transfer_bytes_per_s, and a reply write must finish within
  // io_timeout_ms plus its size at this rate. Default: 1048576 (1 MiB/s).
  uint32_t min_transfer_bytes_per_s = 1u << 20;
  // A connection must complete HELLO (TLS handshake included) within this. Default: 5000.
  uint32_t hello_timeout_ms = 5000;
};

struct ServerConfig {
  std::string listen = "127.0.0.1";  // protocol port's address. Default: 127.0.0.1
  uint16_t port = 7470;              // protocol port; 0 picks a free one. Default: 7470.
  // HTTP port's address (/metrics, /v1/stats, /dashboard are for operators: the
  // server-wide statistics must not reach tenants). Default: 127.0.0.1, whatever
  // `listen` is.
  std::string http_listen = "127.0.0.1";
  uint16_t http_port = 7471;         // HTTP port; 0 picks a free one. Default: 7471.
  // Stable identity of this node (clients hash prefixes onto nodes by it); at most
  // 255 bytes (HELLO carries it with a u8 length). Default: "<listen>:<port>".
  std::string server_id;
  // Largest io_threads / worker_threads Validate accepts.
  static constexpr uint32_t kMaxThreads = 1024;
  uint32_t io_threads = 2;      // threads running sockets, 1..kMaxThreads. Default: 2.
  uint32_t worker_threads = 2;  // threads running store calls, 1..kMaxThreads. Default: 2.
  Limits limits;
  // After SIGINT/SIGTERM (or Shutdown()) /healthz answers 503 at once and the server
  // keeps serving for drain_grace_ms, so that load balancers polling /healthz stop
  // sending new work; then it stops accepting, finishes requests in flight and exits,
  // cutting off what is left after drain_timeout_ms more. Defaults: 0 and 5000.
  uint32_t drain_grace_ms = 0;
  uint32_t drain_timeout_ms = 5000;
  // GET /v1/history (server/stats_history.h): a sample of the headline numbers every
  // history_interval_ms (0: none kept), the newest history_points of them (1..100000).
  // Defaults: 5000 and 720 (one hour).
  uint32_t history_interval_ms = 5000;
  uint32_t history_points = 720;
  std::vector<TenantConfig> tenants;  // at least one. Default: none (an error).
  std::string tls_cert_file;          // PEM; TLS on the protocol port when set
  std::string tls_key_file;           // PEM private key (required with the cert)
  nlohmann::json store = nlohmann::json::object();  // StoreOptions fields (see store_json.h)
  // Chart.js served at /dashboard/chart.min.js (Debian libjs-chart.js).
  std::string chart_js = "/usr/share/javascript/chart.js/chart.min.js";
  // When set, the server writes {"port":P,"http_port":H,"pid":N} here once it listens
  // (tests and scripts use it with port 0). Default: empty.
  std::string ready_file;

  // InvalidArgument for no tenants, duplicate, empty or non-UTF-8 tenant names (control characters included),
  // a tenant with neither or both credential forms, a bad hex digest, zero limits or thread counts, a TLS
  // cert without a key (or the reverse), or one nonzero port for both listeners on overlapping addresses.
  Status Validate() const;
};

// Parses a JSON document (see the file comment). Errors: InvalidArgument naming the
// bad key or value.
Result<ServerConfig> ParseServerConfig(const nlohmann::json& doc);
// Reads and parses a file. Errors: IOError when unreadable; ParseServerConfig's.
Result<ServerConfig> LoadServerConfig(const std::string& path);

// A byte count with an optional suffix: K, M, G, T or KiB, MiB, GiB, TiB (powers of
// 1024), KB, MB, GB, TB (powers of 1000), B; e.g. "68719476736", "64G", "512MiB".
// Errors: InvalidArgument for anything else or a value above 2^64 - 1.
Result<uint64_t> ParseByteSize(const std::string& text);

}  // namespace kvstash::server
