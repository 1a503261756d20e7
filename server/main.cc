// kvstash-server: the network service (docs/protocol.md). Reads --config FILE (JSON,
// server/config.h) and lets flags override single fields; runs until SIGINT/SIGTERM,
// then drains. Exit status: 0 after a clean drain, 2 for a bad configuration, 1 when
// the store or a port cannot be opened.
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>

#include "common/logging.h"
#include "server/config.h"
#include "server/server.h"
#include "server/store_adapter.h"

int main(int argc, char** argv) {
  using kvstash::server::ServerConfig;
  CLI::App app{"kvstash-server: KV prefix cache store, binary protocol + HTTP metrics/dashboard"};
  std::string config_file, log_level = "info";
  std::optional<std::string> listen, server_id, data_dir, tls_cert, tls_key, ready_file, chart_js;
  std::optional<uint16_t> port, http_port;
  std::optional<uint32_t> io_threads, worker_threads, max_connections, max_in_flight,
      max_frame_bytes, idle_timeout_ms, io_timeout_ms, min_transfer_bytes_per_s, drain_grace_ms,
      drain_timeout_ms;
  std::optional<uint64_t> memory_budget;
  std::vector<std::string> tenants;
  app.add_option("--config", config_file, "JSON config file (server/config.h)");
  app.add_option("--listen", listen, "Listen address");
  app.add_option("--port", port, "Protocol port (0: any free port)");
  app.add_option("--http-port", http_port, "HTTP port (0: any free port)");
  app.add_option("--server-id", server_id, "Node identity");
  app.add_option("--data-dir", data_dir, "RocksDB directory (store.path); empty: memory only");
  app.add_option("--memory-budget", memory_budget, "T0 byte budget (store.memory_budget_bytes)");
  app.add_option("--io-threads", io_threads, "Socket threads");
  app.add_option("--worker-threads", worker_threads, "Store threads");
  app.add_option("--max-connections", max_connections, "Open connection limit");
  app.add_option("--max-in-flight", max_in_flight, "Outstanding requests per connection");
  app.add_option("--max-frame-bytes", max_frame_bytes, "Largest frame body");
  app.add_option("--idle-timeout-ms", idle_timeout_ms, "Idle connection timeout");
  app.add_option("--io-timeout-ms", io_timeout_ms, "Per read/write deadline inside a frame");
  app.add_option("--min-transfer-bytes-per-s", min_transfer_bytes_per_s,
                 "Slowest accepted frame transfer rate (whole-frame deadlines)");
  app.add_option("--drain-grace-ms", drain_grace_ms,
                 "After SIGTERM: /healthz 503 and keep serving this long before closing");
  app.add_option("--drain-timeout-ms", drain_timeout_ms,
                 "Then: cut off connections still busy after this long");
  app.add_option("--tenant", tenants, "NAME=CREDENTIAL (repeatable; adds to the config's)");
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain: TLS on the protocol port");
  app.add_option("--tls-key", tls_key, "PEM private key");
  app.add_option("--ready-file", ready_file, "Write {port,http_port,pid} here once listening");
  app.add_option("--chart-js", chart_js, "Chart.js file served to the dashboard");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!kvstash::SetLogLevel(log_level)) {
    std::cerr << "kvstash-server: unknown --log-level " << log_level << "\n";
    return 2;
  }

  ServerConfig cfg;
  if (!config_file.empty()) {
    auto loaded = kvstash::server::LoadServerConfig(config_file);
    if (!loaded.ok()) {
      std::cerr << "kvstash-server: " << loaded.status().ToString() << "\n";
      return 2;
    }
    cfg = std::move(loaded).value();
  }
  if (listen) cfg.listen = *listen;
  if (port) cfg.port = *port;
  if (http_port) cfg.http_port = *http_port;
  if (server_id) cfg.server_id = *server_id;
  if (data_dir) cfg.store["path"] = *data_dir;
  if (memory_budget) cfg.store["memory_budget_bytes"] = *memory_budget;
  if (io_threads) cfg.io_threads = *io_threads;
  if (worker_threads) cfg.worker_threads = *worker_threads;
  if (max_connections) cfg.limits.max_connections = *max_connections;
  if (max_in_flight) cfg.limits.max_in_flight = *max_in_flight;
  if (max_frame_bytes) cfg.limits.max_frame_bytes = *max_frame_bytes;
  if (idle_timeout_ms) cfg.limits.idle_timeout_ms = *idle_timeout_ms;
  if (io_timeout_ms) cfg.limits.io_timeout_ms = *io_timeout_ms;
  if (min_transfer_bytes_per_s) cfg.limits.min_transfer_bytes_per_s = *min_transfer_bytes_per_s;
  if (drain_grace_ms) cfg.drain_grace_ms = *drain_grace_ms;
  if (drain_timeout_ms) cfg.drain_timeout_ms = *drain_timeout_ms;
  if (tls_cert) cfg.tls_cert_file = *tls_cert;
  if (tls_key) cfg.tls_key_file = *tls_key;
  if (ready_file) cfg.ready_file = *ready_file;
  if (chart_js) cfg.chart_js = *chart_js;
  for (const std::string& t : tenants) {
    const size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "kvstash-server: --tenant wants NAME=CREDENTIAL\n";
      return 2;
    }
    std::erase_if(cfg.tenants, [&](const auto& x) { return x.name == t.substr(0, eq); });
    cfg.tenants.push_back({t.substr(0, eq), t.substr(eq + 1), ""});
  }
  if (kvstash::Status s = cfg.Validate(); !s.ok()) {
    std::cerr << "kvstash-server: " << s.ToString() << "\n";
    return 2;
  }
  auto store = kvstash::server::StoreChunkStore::Open(cfg.store);
  if (!store.ok()) {
    std::cerr << "kvstash-server: store: " << store.status().ToString() << "\n";
    return store.status().IsInvalidArgument() ? 2 : 1;
  }
  auto server = kvstash::server::Server::Create(std::move(cfg), std::move(store).value());
  if (!server.ok()) {
    std::cerr << "kvstash-server: " << server.status().ToString() << "\n";
    return 2;
  }
  (*server)->HandleSignals();
  if (kvstash::Status s = (*server)->Start(); !s.ok()) {
    std::cerr << "kvstash-server: " << s.ToString() << "\n";
    return 1;
  }
  (*server)->Wait();
  KVSTASH_LOG_INFO("kvstash-server stopped");
  return 0;
}
