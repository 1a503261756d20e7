// One pooled connection of kvstash::Client to one server (private to client/; the
// client's contract is in include/kvstash/client.h). The client-side mirror of
// server/connection.h: a C++20 coroutine on the client's single I/O thread owns the
// stream (plain TCP or TLS).
//
// Life of a connection
//   1. kIdle -> Connect() -> kConnecting: resolve, TCP connect (TCP_NODELAY,
//      TCP_USER_TIMEOUT = unacked_timeout), TLS handshake with SNI and name check,
//      HELLO request, HELLO reply; all within connect_timeout, or Unavailable.
//   2. HELLO accepted -> kReady, on_state(Ok): Send() pipelines request frames (one
//      async write at a time, batching what is queued); every reply frame goes to
//      on_frame. A reply larger than max_reply_bytes, a bad frame or a lost stream
//      ends the connection with on_state(error); a rejected HELLO with its status.
//      Liveness probe (unacked_timeout > 0): while calls are pending and nothing has
//      been read for unacked_timeout, a PING frame is sent (its reply is dropped). A
//      request the server's host acknowledged before it vanished leaves no unacked
//      bytes, so TCP_USER_TIMEOUT alone would never fire; the probe's bytes stay
//      unacknowledged, and the connection ends with ETIMEDOUT (peer_timed_out())
//      about 2 x unacked_timeout after the host was last heard from. A host that is
//      alive but slow acknowledges the probe and nothing happens.
//   3. The owner then calls Fail() (back to kIdle, the calls on it returned to be
//      retried or failed) or Close() at client shutdown.
// A (re)connect starts a new generation: a coroutine or write of an older generation
// stops without touching the connection, so a reconnect never races a stale reader.
//
// Thread-safety: every member runs on the client's I/O thread (the io_context given
// at construction runs on one thread); none may be called from another.
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/client_call.h"
#include "kvstash/status.h"
#include "protocol/frame_parser.h"

namespace kvstash::client_detail {

class ClientConnection;
struct Transport;  // client_connection.cc: the byte stream of one connect

// The fixed facts of the connections to one server.
struct ClientConnectionOptions {
  std::string host, port;  // as resolved ("::1", "7470")
  std::string tls_name;    // SNI and certificate name (TLS only)
  bool tls_verify = true;  // check the server's certificate (TLS only)
  std::vector<uint8_t> hello_frame;  // the whole HELLO request frame, sent first
  // Who the HELLO says we are, named in the error when the server refuses it: "tenant
  // 'default', no credential given".
  std::string hello_identity;
  uint32_t max_reply_bytes = 0;      // largest reply body accepted
  std::chrono::milliseconds connect_timeout{0};  // connect + TLS + HELLO
  std::chrono::milliseconds unacked_timeout{0};  // TCP_USER_TIMEOUT; 0: kernel default
};

// What a connection reports to its owner, on the I/O thread, never for a stale
// generation. on_state: Ok when the HELLO was accepted (state() is kReady), else why
// the connect failed or the connection was lost (state() still kConnecting or kReady:
// the owner calls Fail()). on_frame: a reply frame, in arrival order.
struct ClientConnectionEvents {
  std::function<void(ClientConnection*, Status)> on_state;
  std::function<void(ClientConnection*, protocol::Frame)> on_frame;
};

class ClientConnection {
 public:
  enum class State { kIdle, kConnecting, kReady };

  // `tls_ctx`: null for plain TCP; else it outlives the connection, as do `ioc`,
  // `options` and the targets of `events`.
  ClientConnection(boost::asio::io_context& ioc, boost::asio::ssl::context* tls_ctx,
                   size_t server, std::shared_ptr<const ClientConnectionOptions> options,
                   ClientConnectionEvents events);
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  State state() const { return state_; }
  size_t server() const { return server_; }  // index into ClientOptions::servers
  // "host:port" of the server (an IPv6 literal in brackets), for messages.
  std::string address() const;
  // The server's max_frame_bytes from its HELLO reply (larger requests must not be
  // sent); the largest uint32_t before a HELLO reply.
  uint32_t max_frame() const { return max_frame_; }
  // The last connection was lost because the peer stopped acknowledging (ETIMEDOUT).
  bool peer_timed_out() const { return peer_timed_out_; }

  // REQUIRES: state() == kIdle. Starts a new generation and connects (kConnecting);
  // the outcome comes as on_state.
  void Connect();
  // Queues `call` until the connection is ready (TakeWaiting). REQUIRES: not kReady.
  void Wait(CallPtr call);
  // The calls queued by Wait, in order; none remain queued.
  std::vector<CallPtr> TakeWaiting();
  // Sends `call`'s request under a new request id (set in call->request_id) and keeps
  // it pending until its reply. REQUIRES: kReady, call->body.size() <= max_frame().
  void Send(CallPtr call);
  // The pending call of reply `request_id`, no longer pending; null when none (its
  // call already finished).
  CallPtr TakePending(uint64_t request_id);
  // Forgets pending call `request_id` (finished elsewhere, e.g. by its deadline).
  void Forget(uint64_t request_id) { pending_.erase(request_id); }
  // After a failed connect or a lost connection: ends the generation, closes the
  // stream, drops queued writes, back to kIdle (the next Send reconnects). Returns
  // the calls that were on it: pending in request-id order, then waiting.
  std::vector<CallPtr> Fail();
  // At client shutdown: ends the generation and closes the stream (state unchanged).
  // Returns the calls that were on it, as Fail.
  std::vector<CallPtr> Close();

 private:
  // The coroutine of generation `gen`: connect, HELLO, then read replies.
  boost::asio::awaitable<void> Run(uint64_t gen, std::shared_ptr<Transport> t);
  // Resolves, connects and (TLS) handshakes; `failure` says what failed, for errors.
  boost::asio::awaitable<void> Open(Transport& t, std::string& failure,
                                    boost::system::error_code& ec);
  // Reads the HELLO reply into the parser (max_frame_ on success). Returns whether a
  // reply (or a bad frame) came; *status is the HELLO's outcome then.
  boost::asio::awaitable<bool> ReadHello(uint64_t gen, Transport& t, std::vector<uint8_t>& buf,
                                         std::string& head, Status* status,
                                         boost::system::error_code& ec);
  // Reads reply frames until the generation ends or the stream fails.
  boost::asio::awaitable<void> Serve(uint64_t gen, Transport& t, std::vector<uint8_t>& buf);
  // on_state(s) unless `gen` is stale.
  void Report(uint64_t gen, Status s);
  // Writes what is queued: one async write at a time, up to 64 frames per write.
  void Pump();
  // Queues one request frame (copying `body`) and writes it.
  void Queue(uint8_t opcode, uint16_t flags, uint64_t request_id, std::span<const uint8_t> body);
  // Arms the liveness probe's timer unless armed (see the file comment).
  void ArmProbe();
  // The probe timer fired for generation `gen`: probe, re-arm or stop.
  void OnProbeTimer(uint64_t gen);

  boost::asio::io_context& ioc_;
  boost::asio::ssl::context* tls_ctx_;
  const size_t server_;
  const std::shared_ptr<const ClientConnectionOptions> options_;
  const ClientConnectionEvents events_;
  std::shared_ptr<Transport> transport_;
  uint32_t max_frame_ = std::numeric_limits<uint32_t>::max();
  protocol::FrameParser parser_;
  State state_ = State::kIdle;
  uint64_t generation_ = 0;  // bumps on every (re)connect; stale coroutines stop
  uint64_t next_id_ = 1;
  std::map<uint64_t, CallPtr> pending_;
  std::vector<CallPtr> waiting_;  // calls queued while connecting
  std::deque<std::vector<uint8_t>> outq_;
  bool writing_ = false;
  bool peer_timed_out_ = false;
  // Liveness probe: the later of the last read and the moment a call was sent to an
  // idle connection; the timer and whether it is armed.
  Clock::time_point quiet_since_{};
  boost::asio::steady_timer probe_timer_;
  bool probe_armed_ = false;
};

}  // namespace kvstash::client_detail
