// kvstash-server: the network service (docs/protocol.md). Reads --config FILE (JSON,
// server/config.h) and lets flags override single fields; runs until SIGINT/SIGTERM/SIGHUP,
// then drains. Exit status: 0 after a clean drain (and for --help), 2 for a bad
// configuration or usage error, 1 when the store or a port cannot be opened.
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

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
      max_frame_bytes, idle_timeout_ms, io_timeout_ms, hello_timeout_ms, min_transfer_bytes_per_s,
      drain_grace_ms, history_interval_ms, history_points,
      drain_timeout_ms;
  std::optional<std::string> memory_budget, disk_budget, http_listen;
  std::vector<std::string> tenants;
  // Help texts show the defaults (ServerConfig's, store::StoreOptions'), which apply
  // when neither the config file nor a flag sets the field.
  const ServerConfig d;
  const kvstash::store::StoreOptions ds;
  auto def = [](const std::string& help, const auto& v) {
    std::ostringstream o;
    o << help << " [default: " << v << "]";
    return o.str();
  };
  app.add_option("--config", config_file, "JSON config file (server/config.h; flags override it)");
  app.add_option("--listen", listen, def("Protocol port address", d.listen));
  app.add_option("--port", port, def("Protocol port (0: any free port)", d.port));
  app.add_option("--http-listen", http_listen,
                 def("HTTP port address (/metrics, /v1/stats, /dashboard: keep it private)",
                     d.http_listen));
  app.add_option("--http-port", http_port, def("HTTP port (0: any free port)", d.http_port));
  app.add_option("--server-id", server_id, def("Node identity, 1..255 bytes", "<listen>:<port>"))
      ->check([](const std::string& v) {
        return v.empty() ? std::string("must not be empty (omit it for <listen>:<port>)") : std::string();
      });
  app.add_option("--data-dir", data_dir,
                 def("RocksDB directory (store.path); empty: memory only", "empty"));
  app.add_option("--memory-budget", memory_budget,
                 def("T0 byte budget (store.memory_budget_bytes; suffixes K M G T, KiB.., KB..)",
                     ds.memory_budget_bytes));
  app.add_option("--disk-budget", disk_budget,
                 def("T1 byte budget (store.disk_budget_bytes; suffixes as --memory-budget)",
                     ds.disk_budget_bytes));
  app.add_option("--io-threads", io_threads, def("Socket threads", d.io_threads));
  app.add_option("--worker-threads", worker_threads, def("Store threads", d.worker_threads));
  app.add_option("--max-connections", max_connections,
                 def("Open connection limit", d.limits.max_connections));
  app.add_option("--max-in-flight", max_in_flight,
                 def("Outstanding requests per connection", d.limits.max_in_flight));
  app.add_option("--max-frame-bytes", max_frame_bytes,
                 def("Largest frame body", d.limits.max_frame_bytes));
  app.add_option("--idle-timeout-ms", idle_timeout_ms,
                 def("Idle connection timeout", d.limits.idle_timeout_ms));
  app.add_option("--io-timeout-ms", io_timeout_ms,
                 def("Per read/write deadline inside a frame", d.limits.io_timeout_ms));
  app.add_option("--hello-timeout-ms", hello_timeout_ms,
                 def("TLS handshake + HELLO must finish within this", d.limits.hello_timeout_ms));
  app.add_option("--min-transfer-bytes-per-s", min_transfer_bytes_per_s,
                 def("Slowest accepted frame transfer rate (whole-frame deadlines)",
                     d.limits.min_transfer_bytes_per_s));
  app.add_option("--drain-grace-ms", drain_grace_ms,
                 def("After SIGTERM: /healthz 503 and keep serving this long before closing",
                     d.drain_grace_ms));
  app.add_option("--drain-timeout-ms", drain_timeout_ms,
                 def("Then: cut off connections still busy after this long", d.drain_timeout_ms));
  app.add_option("--history-interval-ms", history_interval_ms,
                 def("Sample the headline numbers for /v1/history this often (0: off)",
                     d.history_interval_ms));
  app.add_option("--history-points", history_points,
                 def("Samples /v1/history keeps (the newest)", d.history_points));
  app.add_option("--tenant", tenants, "NAME=CREDENTIAL (repeatable; adds to the config's)");
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain: TLS on the protocol port");
  app.add_option("--tls-key", tls_key, "PEM private key");
  app.add_option("--ready-file", ready_file,
                 def("Write {port,http_port,pid} here once listening", "none"));
  app.add_option("--chart-js", chart_js, def("Chart.js file served to the dashboard", d.chart_js));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();
  // Usage errors exit 2, as bad configurations do (CLI11's own codes are 100+).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
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
  if (http_listen) cfg.http_listen = *http_listen;
  if (http_port) cfg.http_port = *http_port;
  if (server_id) cfg.server_id = *server_id;
  if (data_dir) cfg.store["path"] = *data_dir;
  for (const auto& [flag, value, key] :
       {std::tuple{"--memory-budget", &memory_budget, "memory_budget_bytes"},
        std::tuple{"--disk-budget", &disk_budget, "disk_budget_bytes"}}) {
    if (!*value) continue;
    auto bytes = kvstash::server::ParseByteSize(**value);
    if (!bytes.ok()) {
      std::cerr << "kvstash-server: " << flag << ": " << bytes.status().message() << "\n";
      return 2;
    }
    cfg.store[key] = *bytes;
  }
  if (io_threads) cfg.io_threads = *io_threads;
  if (worker_threads) cfg.worker_threads = *worker_threads;
  if (max_connections) cfg.limits.max_connections = *max_connections;
  if (max_in_flight) cfg.limits.max_in_flight = *max_in_flight;
  if (max_frame_bytes) cfg.limits.max_frame_bytes = *max_frame_bytes;
  if (idle_timeout_ms) cfg.limits.idle_timeout_ms = *idle_timeout_ms;
  if (io_timeout_ms) cfg.limits.io_timeout_ms = *io_timeout_ms;
  if (hello_timeout_ms) cfg.limits.hello_timeout_ms = *hello_timeout_ms;
  if (min_transfer_bytes_per_s) cfg.limits.min_transfer_bytes_per_s = *min_transfer_bytes_per_s;
  if (drain_grace_ms) cfg.drain_grace_ms = *drain_grace_ms;
  if (drain_timeout_ms) cfg.drain_timeout_ms = *drain_timeout_ms;
  if (tls_cert) cfg.tls_cert_file = *tls_cert;
  if (tls_key) cfg.tls_key_file = *tls_key;
  if (ready_file) cfg.ready_file = *ready_file;
  if (chart_js) cfg.chart_js = *chart_js;
  if (history_interval_ms) cfg.history_interval_ms = *history_interval_ms;
  if (history_points) cfg.history_points = *history_points;
  // A --tenant replaces the config file's tenant of that name; two --tenant flags for one
  // name are a usage error (which credential was meant cannot be guessed).
  std::set<std::string> flag_tenants;
  for (const std::string& t : tenants) {
    const size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "kvstash-server: --tenant wants NAME=CREDENTIAL\n";
      return 2;
    }
    if (!flag_tenants.insert(t.substr(0, eq)).second) {
      std::cerr << "kvstash-server: --tenant " << t.substr(0, eq) << " is given twice\n";
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
