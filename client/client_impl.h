// Client::Impl: the connection pool and I/O thread behind kvstash::Client (private to
// client/; the public contract is in include/kvstash/client.h). One asio::io_context on
// one thread owns every connection; public calls Submit() from any thread and their
// completions run on that thread. client_impl.cc has the connection logic (connect,
// HELLO, TLS, pipelined frames, deadlines, retries); client.cc the typed calls.
// Thread-safety: Submit, ServerFor and ReadyMaxFrame may be called from any thread;
// everything else runs on the I/O thread.
#pragma once

#include "kvstash/client.h"

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/checksum.h"
#include "common/logging.h"
#include "server/protocol/frame_parser.h"
#include "server/protocol/messages.h"

namespace kvstash {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using protocol::Frame;
using protocol::Opcode;
using FrameDone = std::function<void(Result<Frame>)>;

namespace client_detail {

struct Conn;

// One logical call across its attempts. Touched only on the client's I/O thread.
struct Call {
  uint8_t opcode = 0;
  uint16_t flags = 0;
  std::vector<uint8_t> body;
  // Servers in preference order: the chain's rendezvous order for a routed call, one
  // server for a call by server index. Each attempt picks (Client::Impl::PickServer).
  std::vector<size_t> order;
  size_t server = 0;  // server of the current attempt
  Clock::time_point deadline;
  uint32_t attempt = 0;
  FrameDone done;
  bool finished = false;
  std::unique_ptr<asio::steady_timer> deadline_timer, backoff_timer;
  Conn* conn = nullptr;  // connection of the attempt in flight
  uint64_t request_id = 0;
};
using CallPtr = std::shared_ptr<Call>;

}  // namespace client_detail

class Client::Impl {
 public:
  // Both in client_impl.cc, where Conn is complete.
  explicit Impl(ClientOptions o);
  ~Impl();

  Status Init();
  void Stop();
  size_t ServerFor(const StoredKey& route) const { return RendezvousPick(opts_.servers, route); }
  // Starts a call to server `server` on the I/O thread; `done` runs there exactly once.
  void Submit(size_t server, Opcode op, uint16_t flags, std::vector<uint8_t> body,
              const CallOptions& call, FrameDone done);
  // Same for a call routed by the chain key `route`: each attempt goes to the first
  // server of route's rendezvous order that is not marked down (failover, client.h).
  void SubmitRouted(const StoredKey& route, Opcode op, uint16_t flags, std::vector<uint8_t> body,
                    const CallOptions& call, FrameDone done);
  const ClientOptions& options() const { return opts_; }
  // Smallest max_frame_bytes among server `server`'s ready connections (0: none ready).
  uint32_t ReadyMaxFrame(size_t server);

 private:
  friend struct client_detail::Conn;
  void Start(std::vector<size_t> order, Opcode op, uint16_t flags, std::vector<uint8_t> body,
             const CallOptions& call, FrameDone done);
  // The server of c's next attempt: the first of c->order not marked down (the first
  // of all when every one is).
  size_t PickServer(const client_detail::Call& c) const;
  void Send(const client_detail::CallPtr& c);
  void Finish(const client_detail::CallPtr& c, Result<Frame> r);
  void AttemptFailed(const client_detail::CallPtr& c, Status s);

  ClientOptions opts_;
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  struct Endpoint {
    std::string host, port;
  };
  std::vector<Endpoint> endpoints_;
  std::vector<std::vector<std::unique_ptr<client_detail::Conn>>> pools_;
  std::vector<size_t> next_conn_;
  // Per server: routed calls skip it until then (its last connect failed).
  std::vector<Clock::time_point> down_until_;
  std::unique_ptr<asio::ssl::context> tls_ctx_;  // set when options.tls.enabled
  std::mt19937_64 rng_{0x6b76636c};
  bool stopped_ = false;
};

}  // namespace kvstash
