// A kvstash-server child process for `kvstash-demo --start-server BIN`: spawned with
// the given data folder, ports and one tenant (its credential in a mode-0600 config file
// in the data folder, .demo-server.json, never on the server's command line), waited
// for through its --ready-file
// (so port 0 works), stopped with SIGTERM (the server drains and exits) unless the
// user keeps it running. StartServerAndConnect() is the start-up both demo model kinds
// share (optional server, client, ping).
//
// A server started with exit_with_parent (the default) ends with the demo however the
// demo ends: the kernel sends it SIGTERM when the demo process dies (PR_SET_PDEATHSIG,
// which covers SIGKILL and crashes), and SIGINT, SIGTERM or SIGHUP to the demo first
// stop the server and wait for it to exit, so that a demo run again at once finds the
// port and the data folder free.
//
// Errors: Unavailable when the binary cannot be spawned, exits during start-up or is
// not ready within `ready_timeout`. When it exits because another process holds its
// port, HTTP port or the data folder's RocksDB LOCK, the message names that process
// (demo/resource_holder.h) and the fix.
// Thread-safety: not thread-safe; one started DemoServer per process at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/result.h"

namespace kvstash::demo {

struct DemoServerOptions {
  std::string binary;                  // path of kvstash-server
  std::string data_dir = "data";       // RocksDB folder (store.path). Default: data
  uint16_t port = 7470;                // 0: any free port. Default: 7470.
  uint16_t http_port = 7471;           // 0: any free port. Default: 7471.
  std::string tenant, credential;      // the one tenant of the demo
  std::string log_file;                // server stdout/stderr; "" = inherit
  std::string listen = "127.0.0.1";    // protocol address. Default: 127.0.0.1
  // No RocksDB: memory tier only (data_dir still holds the ready file). Default: false.
  bool memory_only = false;
  // Words run before the binary, e.g. {"ip", "netns", "exec", NAME} to start the server
  // in a network namespace (found on PATH). Default: none.
  std::vector<std::string> launcher;
  std::vector<std::string> extra_args;  // appended to the server's flags. Default: none.
  std::chrono::seconds ready_timeout{60};
  // The server ends when the demo process ends (see above). False for --keep-server.
  // Default: true.
  bool exit_with_parent = true;
};

class DemoServer {
 public:
  DemoServer() = default;
  ~DemoServer();  // stops the server unless Detach() was called
  DemoServer(const DemoServer&) = delete;
  DemoServer& operator=(const DemoServer&) = delete;

  Status Start(const DemoServerOptions& options);
  // SIGTERM and wait; returns the exit code (128 + signal when killed), -1 if not running.
  int Stop();
  // Leaves the server running after this object is destroyed (its signal handlers go;
  // a server started with exit_with_parent still ends with the demo process).
  void Detach();

  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }
  uint16_t http_port() const { return http_port_; }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0, http_port_ = 0;
};

// When the server a DemoServer started (and has not stopped or detached) has exited on
// its own: "the kvstash-server it started (pid N) was killed by signal 9; its log: F"
// (or "exited with status N"), for the demo's error messages; "" while it runs or when
// there is none. Does not reap it (Stop() still returns its status).
// Thread-safety: as DemoServer.
std::string StartedServerExitNote();

// Server-side GET handling time so far (microseconds: mean x count of GET in the first
// server's /v1/stats); -1 if the stats cannot be had.
double ServerGetUs(Client* client);

// The end of a demo with `start_server` non-empty: stops `server`, or with `keep`
// leaves it running and prints its pid (and its dashboard URL when `show_dashboard`).
void FinishServer(const std::string& start_server, bool keep, bool show_dashboard, DemoServer* server);

// 2 x `bytes` lowercase hex digits from std::random_device (demo credentials, run ids).
std::string RandomHex(size_t bytes);

// The server side of `kvstash-demo` for every model kind. With `start_server` (a
// kvstash-server path) non-empty: starts it in `server` with `data_dir` (log in
// data_dir/kvstash-server.log), `port`, `http_port` and the tenant of `*client` (a random
// credential when it has none), points `*client` at it and prints its pid, ports and
// dashboard URL; the server ends with the demo unless `keep_server`. Then connects
// `*client` and pings the first server.
// Errors: the start, connect or ping Status, with "starting kvstash-server", "client" or
// "ping HOST:PORT" as context.
Result<std::unique_ptr<Client>> StartServerAndConnect(const std::string& start_server, const std::string& data_dir,
                                                      uint16_t port, uint16_t http_port, bool keep_server,
                                                      ClientOptions* client, DemoServer* server);

}  // namespace kvstash::demo
