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

namespace {

using kvstash::server::ServerConfig;

// The command line: each flag given overrides one field of the config file's ServerConfig.
struct ServerFlags {
  std::string config_file, log_level = "info";
  std::optional<std::string> listen, server_id, data_dir, tls_cert, tls_key, ready_file, chart_js;
  std::optional<uint16_t> port, http_port;
  std::optional<uint32_t> io_threads, worker_threads, max_connections, max_in_flight,
      max_frame_bytes, idle_timeout_ms, io_timeout_ms, hello_timeout_ms, min_transfer_bytes_per_s,
      drain_grace_ms, history_interval_ms, history_points,
      drain_timeout_ms;
  std::optional<std::string> memory_budget, disk_budget, http_listen;
  std::vector<std::string> tenants;
};

// Declares every flag on `app`, stored into `f` (which must outlive the parse).
void AddFlags(CLI::App& app, ServerFlags& f) {
  // Help texts show the defaults (ServerConfig's, store::StoreOptions'), which apply
  // when neither the config file nor a flag sets the field.
  const ServerConfig d;
  const kvstash::store::StoreOptions ds;
  auto def = [](const std::string& help, const auto& v) {
    std::ostringstream o;
    o << help << " [default: " << v << "]";
    return o.str();
  };
  app.add_option("--config", f.config_file, "JSON config file (server/config.h; flags override it)");
  app.add_option("--listen", f.listen, def("Protocol port address", d.listen));
  app.add_option("--port", f.port, def("Protocol port (0: any free port)", d.port));
  app.add_option("--http-listen", f.http_listen,
                 def("HTTP port address (/metrics, /v1/stats, /dashboard: keep it private)", d.http_listen));
  app.add_option("--http-port", f.http_port, def("HTTP port (0: any free port)", d.http_port));
  app.add_option("--server-id", f.server_id, def("Node identity, 1..255 bytes", "<listen>:<port>"))
      ->check([](const std::string& v) {
        return v.empty() ? std::string("must not be empty (omit it for <listen>:<port>)") : std::string();
      });
  app.add_option("--data-dir", f.data_dir,
                 def("RocksDB directory (store.path); empty: memory only", "empty"));
  app.add_option("--memory-budget", f.memory_budget,
                 def("T0 byte budget (store.memory_budget_bytes; suffixes K M G T, KiB.., KB..)",
                     ds.memory_budget_bytes));
  app.add_option(
      "--disk-budget", f.disk_budget,
      def("T1 byte budget (store.disk_budget_bytes; suffixes as --memory-budget)", ds.disk_budget_bytes));
  app.add_option("--io-threads", f.io_threads, def("Socket threads", d.io_threads));
  app.add_option("--worker-threads", f.worker_threads, def("Store threads", d.worker_threads));
  app.add_option("--max-connections", f.max_connections,
                 def("Open connection limit", d.limits.max_connections));
  app.add_option("--max-in-flight", f.max_in_flight,
                 def("Outstanding requests per connection", d.limits.max_in_flight));
  app.add_option("--max-frame-bytes", f.max_frame_bytes, def("Largest frame body", d.limits.max_frame_bytes));
  app.add_option("--idle-timeout-ms", f.idle_timeout_ms,
                 def("Idle connection timeout", d.limits.idle_timeout_ms));
  app.add_option("--io-timeout-ms", f.io_timeout_ms,
                 def("Per read/write deadline inside a frame", d.limits.io_timeout_ms));
  app.add_option("--hello-timeout-ms", f.hello_timeout_ms,
                 def("TLS handshake + HELLO must finish within this", d.limits.hello_timeout_ms));
  app.add_option(
      "--min-transfer-bytes-per-s", f.min_transfer_bytes_per_s,
      def("Slowest accepted frame transfer rate (whole-frame deadlines)", d.limits.min_transfer_bytes_per_s));
  app.add_option("--drain-grace-ms", f.drain_grace_ms,
                 def("After SIGTERM, SIGINT or SIGHUP (each drains and stops; none reloads): /healthz 503 "
                     "and keep serving this long before closing",
                     d.drain_grace_ms));
  app.add_option("--drain-timeout-ms", f.drain_timeout_ms,
                 def("Then: cut off connections still busy after this long", d.drain_timeout_ms));
  app.add_option(
      "--history-interval-ms", f.history_interval_ms,
      def("Sample the headline numbers for /v1/history this often (0: off)", d.history_interval_ms));
  app.add_option("--history-points", f.history_points,
                 def("Samples /v1/history keeps (the newest)", d.history_points));
  app.add_option("--tenant", f.tenants, "NAME=CREDENTIAL (repeatable; adds to the config's)");
  app.add_option("--tls-cert", f.tls_cert, "PEM certificate chain: TLS on the protocol port");
  app.add_option("--tls-key", f.tls_key, "PEM private key");
  app.add_option("--ready-file", f.ready_file, def("Write {port,http_port,pid} here once listening", "none"));
  app.add_option("--chart-js", f.chart_js, def("Chart.js file served to the dashboard", d.chart_js));
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error, off")->capture_default_str();
}

// Sets the fields of `cfg` that the flags override. Returns false after printing a
// usage error (a byte size that does not parse, a malformed or repeated --tenant).
bool ApplyFlags(const ServerFlags& f, ServerConfig& cfg) {
  if (f.listen) cfg.listen = *f.listen;
  if (f.port) cfg.port = *f.port;
  if (f.http_listen) cfg.http_listen = *f.http_listen;
  if (f.http_port) cfg.http_port = *f.http_port;
  if (f.server_id) cfg.server_id = *f.server_id;
  if (f.data_dir) cfg.store["path"] = *f.data_dir;
  for (const auto& [flag, value, key] :
       {std::tuple{"--memory-budget", &f.memory_budget, "memory_budget_bytes"},
        std::tuple{"--disk-budget", &f.disk_budget, "disk_budget_bytes"}}) {
    if (!*value) continue;
    auto bytes = kvstash::server::ParseByteSize(**value);
    if (!bytes.ok()) {
      std::cerr << "kvstash-server: " << flag << ": " << bytes.status().message() << "\n";
      return false;
    }
    cfg.store[key] = *bytes;
  }
  if (f.io_threads) cfg.io_threads = *f.io_threads;
  if (f.worker_threads) cfg.worker_threads = *f.worker_threads;
  if (f.max_connections) cfg.limits.max_connections = *f.max_connections;
  if (f.max_in_flight) cfg.limits.max_in_flight = *f.max_in_flight;
  if (f.max_frame_bytes) cfg.limits.max_frame_bytes = *f.max_frame_bytes;
  if (f.idle_timeout_ms) cfg.limits.idle_timeout_ms = *f.idle_timeout_ms;
  if (f.io_timeout_ms) cfg.limits.io_timeout_ms = *f.io_timeout_ms;
  if (f.hello_timeout_ms) cfg.limits.hello_timeout_ms = *f.hello_timeout_ms;
  if (f.min_transfer_bytes_per_s) cfg.limits.min_transfer_bytes_per_s = *f.min_transfer_bytes_per_s;
  if (f.drain_grace_ms) cfg.drain_grace_ms = *f.drain_grace_ms;
  if (f.drain_timeout_ms) cfg.drain_timeout_ms = *f.drain_timeout_ms;
  if (f.tls_cert) cfg.tls_cert_file = *f.tls_cert;
  if (f.tls_key) cfg.tls_key_file = *f.tls_key;
  if (f.ready_file) cfg.ready_file = *f.ready_file;
  if (f.chart_js) cfg.chart_js = *f.chart_js;
  if (f.history_interval_ms) cfg.history_interval_ms = *f.history_interval_ms;
  if (f.history_points) cfg.history_points = *f.history_points;
  // A --tenant replaces the config file's tenant of that name; two --tenant flags for one
  // name are a usage error (which credential was meant cannot be guessed).
  std::set<std::string> flag_tenants;
  for (const std::string& t : f.tenants) {
    const size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "kvstash-server: --tenant wants NAME=CREDENTIAL\n";
      return false;
    }
    if (!flag_tenants.insert(t.substr(0, eq)).second) {
      std::cerr << "kvstash-server: --tenant " << t.substr(0, eq) << " is given twice\n";
      return false;
    }
    std::erase_if(cfg.tenants, [&](const auto& x) { return x.name == t.substr(0, eq); });
    cfg.tenants.push_back({t.substr(0, eq), t.substr(eq + 1), ""});
  }
  return true;
}

// Opens the store, starts the server and waits for its drain; returns the exit status.
int Serve(ServerConfig cfg) {
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvstash-server: KV prefix cache store, binary protocol + HTTP metrics/dashboard"};
  ServerFlags f;
  AddFlags(app, f);
  // Usage errors exit 2, as bad configurations do (CLI11's own codes are 100+).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!kvstash::SetLogLevel(f.log_level)) {
    std::cerr << "kvstash-server: unknown --log-level " << f.log_level << "\n";
    return 2;
  }

  ServerConfig cfg;
  if (!f.config_file.empty()) {
    auto loaded = kvstash::server::LoadServerConfig(f.config_file);
    if (!loaded.ok()) {
      std::cerr << "kvstash-server: " << loaded.status().ToString() << "\n";
      return 2;
    }
    cfg = std::move(loaded).value();
  }
  if (!ApplyFlags(f, cfg)) return 2;
  if (kvstash::Status s = cfg.Validate(); !s.ok()) {
    std::cerr << "kvstash-server: " << s.ToString() << "\n";
    return 2;
  }
  return Serve(std::move(cfg));
}
