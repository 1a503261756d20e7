// Server: the kvstash network service. A protocol port (connection.h: one coroutine
// per connection) and an HTTP port (http_server.h) on one io_context run by
// `io_threads` threads, with store calls on a pool of `worker_threads`.
//
// Shutdown (SIGINT/SIGTERM/SIGHUP when HandleSignals() was called, or Shutdown()): /healthz
// turns 503 at once and stays so until the process ends; the server keeps serving for
// drain_grace_ms (load balancers take it out of rotation), then stops accepting, every
// connection stops reading and finishes the requests it has in flight, and the
// threads stop; after drain_timeout_ms whatever is left is cut off. The ready file is
// removed when Wait() returns.
//
// Thread-safety: Start/Wait from one thread; Shutdown from any thread (also from a
// signal handler's strand).
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstash/result.h"
#include "server/chunk_store.h"
#include "server/config.h"

namespace kvstash::server {

class Server {
 public:
  // Errors: ServerConfig::Validate's; TLS files or a tenant's dckv artifact that do
  // not load or match their digest (InvalidArgument).
  static Result<std::unique_ptr<Server>> Create(ServerConfig config,
                                                std::unique_ptr<ChunkStore> store);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Shut down (drain) on SIGINT, SIGTERM and SIGHUP (call before Start). Once Wait()
  // has drained, the process ignores these signals (SIG_IGN), so that a second signal
  // cannot kill it while the store closes.
  void HandleSignals();
  // Binds both ports, writes the ready file, starts the threads.
  // Errors: IOError when a port cannot be bound.
  Status Start();
  // Bound ports (after Start).
  uint16_t port() const;
  uint16_t http_port() const;
  // Begins the drain (see the file comment). Idempotent.
  void Shutdown();
  // Blocks until the drain finished and every thread stopped.
  void Wait();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::server
