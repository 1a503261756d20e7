// Client::Impl: the connection pool and I/O thread behind kvstash::Client (private to
// client/; the public contract is in include/kvstash/client.h). One asio::io_context on
// one thread owns every connection (client_connection.h); public calls Submit() from
// any thread and their completions run on that thread. client_impl.cc has the call
// logic (pool choice, deadlines, retries, failover); client.cc the typed calls.
// Thread-safety: Submit, SubmitRouted, ServerFor and ReadyMaxFrame may be called from
// any thread; everything else runs on the I/O thread.
#pragma once

#include "kvstash/client.h"

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "client/client_call.h"
#include "client/client_connection.h"
#include "protocol/frame.h"

namespace kvstash {

class Client::Impl {
 public:
  explicit Impl(ClientOptions o);
  ~Impl();

  Status Init();
  void Stop();
  size_t ServerFor(const StoredKey& route) const { return RendezvousPick(opts_.servers, route); }
  // Starts a call to server `server` on the I/O thread; `done` runs there exactly once.
  void Submit(size_t server, protocol::Opcode op, uint16_t flags, std::vector<uint8_t> body,
              const CallOptions& call, client_detail::FrameDone done);
  // Same for a call routed by the chain key `route`: each attempt goes to the first
  // server of route's rendezvous order that is not marked down (failover, client.h).
  void SubmitRouted(const StoredKey& route, protocol::Opcode op, uint16_t flags,
                    std::vector<uint8_t> body, const CallOptions& call,
                    client_detail::FrameDone done);
  const ClientOptions& options() const { return opts_; }
  // Smallest max_frame_bytes among server `server`'s ready connections (0: none ready).
  uint32_t ReadyMaxFrame(size_t server);

 private:
  using Call = client_detail::Call;
  using CallPtr = client_detail::CallPtr;
  using ClientConnection = client_detail::ClientConnection;

  void Start(std::vector<size_t> order, protocol::Opcode op, uint16_t flags,
             std::vector<uint8_t> body, const CallOptions& call, client_detail::FrameDone done);
  // The server of c's next attempt: the first of c->order not marked down (the first
  // of all when every one is).
  size_t PickServer(const Call& c) const;
  // The connection of server `server` for the next attempt: a ready one, round robin,
  // else the next in turn.
  ClientConnection* PickConnection(size_t server);
  void Send(const CallPtr& c);
  void Finish(const CallPtr& c, Result<protocol::Frame> r);
  void AttemptFailed(const CallPtr& c, Status s);
  // ClientConnectionEvents of every connection.
  void OnConnectionState(ClientConnection* k, Status s);
  void OnReply(ClientConnection* k, protocol::Frame f);

  ClientOptions opts_;
  boost::asio::io_context ioc_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::vector<std::vector<std::unique_ptr<ClientConnection>>> pools_;
  std::vector<size_t> next_conn_;
  // Per server: routed calls skip it until then (its last connect failed).
  std::vector<client_detail::Clock::time_point> down_until_;
  std::unique_ptr<boost::asio::ssl::context> tls_ctx_;  // set when options.tls.enabled
  std::mt19937_64 rng_{0x6b76636c};
  bool stopped_ = false;
};

}  // namespace kvstash
