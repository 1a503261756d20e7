// One protocol connection: a C++20 coroutine that owns its socket (plain TCP or TLS),
// as in the asio cpp20 examples, on its own strand.
//
// Life of a connection
//   1. (TLS) handshake, then HELLO within hello_timeout_ms of the accept, or close.
//   2. Reader: reads bytes (deadline: idle_timeout_ms between requests, io_timeout_ms
//      once a frame has started), feeds the FrameParser, answers HELLO inline and posts
//      every other request to the worker pool. With max_in_flight requests
//      outstanding it stops reading (backpressure) until one is answered.
//   3. Writer: sends queued replies in arrival order of completion (pipelined replies
//      may be out of request order), each write under an io_timeout_ms deadline.
//   4. A bad frame gets an error reply when its header was readable, then the
//      connection closes after flushing; a deadline or I/O error closes at once.
//   5. Drain (server shutdown): stop reading, finish requests in flight, flush, close.
// Deadlines are steady_timers that close the socket (Boost 1.74 has no cancel_after).
//
// Thread-safety: all members are touched only on the connection's strand.
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <functional>
#include <memory>

#include "server/config.h"
#include "server/metrics.h"
#include "server/request_handler.h"

namespace kvstash::server {

// What the server can ask of a live connection (from any thread).
class ConnectionHandle {
 public:
  virtual ~ConnectionHandle() = default;
  // Stops reading new requests; answers those in flight, then closes.
  virtual void BeginDrain() = 0;
};

struct ConnectionContext {
  const Limits* limits;
  RequestHandler* handler;
  Metrics* metrics;
  boost::asio::io_context* workers;  // runs store calls (the server's worker threads)
  boost::asio::ssl::context* tls;  // nullptr: plain TCP
  // Called on close (any thread), once per connection.
  std::function<void(uint64_t id)> on_close;
};

// Starts serving `socket` (already accepted) on a new strand of its executor. Returns
// the handle the server keeps for draining.
// REQUIRES: `socket` was accepted on `ioc`.
std::shared_ptr<ConnectionHandle> StartConnection(boost::asio::io_context& ioc,
                                                  boost::asio::ip::tcp::socket socket,
                                                  uint64_t id, const ConnectionContext& ctx);

}  // namespace kvstash::server
