// The connection logic of kvstash::Client (client_impl.h).
#include "client/client_impl.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>

namespace kvstash {

using namespace client_detail;  // Call, Conn: this file's own types

namespace {

void LogFailure(const char* what, std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    KVSTASH_LOG_ERROR("{} ended with an exception: {}", what, ex.what());
  }
}

// "host:port" as the user writes it: an IPv6 literal in brackets ("[::1]:7470").
std::string HostPort(const std::string& host, const std::string& port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
}

}  // namespace

namespace client_detail {

// The byte stream of one connection attempt: plain TCP, or TLS over TCP. Shared by the
// coroutine and the writes that use it, so that a reconnect (a new Transport) never
// destroys a stream with an operation in flight.
struct Transport {
  Transport(asio::io_context& ioc, asio::ssl::context* tls_ctx) : plain(ioc) {
    if (tls_ctx) tls.emplace(tcp::socket(ioc), *tls_ctx);
  }
  tcp::socket& lowest() { return tls ? tls->next_layer() : plain; }
  void Close() {
    boost::system::error_code ec;
    lowest().close(ec);
  }
  template <typename Buffers>
  asio::awaitable<size_t> ReadSome(const Buffers& b, boost::system::error_code& ec) {
    if (tls) co_return co_await tls->async_read_some(b, asio::redirect_error(asio::use_awaitable, ec));
    co_return co_await plain.async_read_some(b, asio::redirect_error(asio::use_awaitable, ec));
  }
  template <typename Buffers>
  asio::awaitable<void> WriteAll(const Buffers& b, boost::system::error_code& ec) {
    if (tls) co_await asio::async_write(*tls, b, asio::redirect_error(asio::use_awaitable, ec));
    else co_await asio::async_write(plain, b, asio::redirect_error(asio::use_awaitable, ec));
  }
  template <typename Buffers, typename Handler>
  void AsyncWriteAll(const Buffers& b, Handler&& h) {
    if (tls) asio::async_write(*tls, b, std::forward<Handler>(h));
    else asio::async_write(plain, b, std::forward<Handler>(h));
  }

  tcp::socket plain;  // unused when tls is set
  std::optional<asio::ssl::stream<tcp::socket>> tls;
};

// A pooled connection. Touched only on the client's I/O thread.
struct Conn {
  Conn(Client::Impl* client, asio::io_context& ioc, asio::ssl::context* tls_ctx, size_t server,
       uint32_t max_reply)
      : client(client), transport(std::make_shared<Transport>(ioc, tls_ctx)), server(server),
        parser(max_reply, protocol::FrameParser::Direction::kReplies) {}

  enum class State { kIdle, kConnecting, kReady };
  Client::Impl* client;
  std::shared_ptr<Transport> transport;
  size_t server;
  // The server's max_frame_bytes from its HELLO reply: larger requests are refused
  // locally (InvalidArgument), never sent.
  uint32_t max_frame = std::numeric_limits<uint32_t>::max();
  protocol::FrameParser parser;
  State state = State::kIdle;
  uint64_t generation = 0;  // bumps on every (re)connect; stale coroutines stop
  uint64_t next_id = 1;
  std::map<uint64_t, CallPtr> pending;
  std::vector<CallPtr> waiting;  // calls queued while connecting
  std::deque<std::vector<uint8_t>> outq;
  bool writing = false;
  // The connection was lost because the peer stopped acknowledging (ETIMEDOUT).
  bool peer_timed_out = false;
};

}  // namespace client_detail

// ---------------------------------------------------------------- connection logic
namespace {

// Sets SNI and the name the server's certificate must match (RFC 6125 host name, or an
// IP address literal, which gets no SNI per RFC 6066 §3).
bool SetTlsName(asio::ssl::stream<tcp::socket>& s, const std::string& name, bool verify) {
  boost::system::error_code ec;
  asio::ip::make_address(name, ec);
  const bool is_ip = !ec;
  SSL* ssl = s.native_handle();
  if (!is_ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) return false;
  if (!verify) return true;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  return is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1
               : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0) == 1;
}

asio::awaitable<void> ConnectAndServe(Conn* c, std::shared_ptr<Transport> t, uint64_t gen,
                                      std::string host, std::string port, std::string tls_name,
                                      bool tls_verify, std::string hello_frame,
                                      std::chrono::milliseconds timeout,
                                      std::chrono::milliseconds unacked_timeout,
                                      std::function<void(Conn*, uint64_t, Status)> on_ready,
                                      std::function<void(Conn*, uint64_t, Frame)> on_frame) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer guard(ex);
  guard.expires_after(timeout);
  auto timed_out = std::make_shared<bool>(false);
  guard.async_wait([t, timed_out](boost::system::error_code ec) {
    if (ec) return;
    *timed_out = true;
    t->Close();
  });
  boost::system::error_code ec;
  std::string failure;  // what failed, for the error message
  tcp::resolver resolver(ex);
  auto results = co_await resolver.async_resolve(host, port, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) co_await asio::async_connect(t->lowest(), results, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) t->lowest().set_option(tcp::no_delay(true), ec);
  if (!ec && unacked_timeout.count() > 0) {
    // Sent bytes the peer's host does not acknowledge this long abort the connection
    // (ETIMEDOUT): a host that vanished is noticed (ClientOptions::unacked_timeout).
    const unsigned int ms = static_cast<unsigned int>(unacked_timeout.count());
    if (setsockopt(t->lowest().native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &ms,
                   sizeof(ms)) != 0) {
      KVSTASH_LOG_WARN("TCP_USER_TIMEOUT not set on the connection to {}:{}", host, port);
    }
  }
  if (!ec && t->tls) {
    if (!SetTlsName(*t->tls, tls_name, tls_verify)) {
      ec = asio::error::invalid_argument;
      failure = "TLS server name " + tls_name;
    } else {
      co_await t->tls->async_handshake(asio::ssl::stream_base::client,
                                       asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        const long verify = SSL_get_verify_result(t->tls->native_handle());
        failure = "TLS handshake";
        if (verify != X509_V_OK) {
          failure += std::string(" (certificate: ") + X509_verify_cert_error_string(verify) + ")";
        } else {
          failure += " (does the server's port speak TLS? A plain port answers a TLS hello with a "
                     "kvstash error frame)";
        }
      }
    }
  }
  if (!ec) co_await t->WriteAll(asio::buffer(hello_frame), ec);
  // Read the HELLO reply.
  std::vector<uint8_t> buf(256 * 1024);
  Status hello_status = Status::Ok();
  bool have_hello = false;
  std::string hello_head;  // the HELLO reply's first 5 bytes ("HTTP/" from an HTTP port)
  while (!ec && !have_hello) {
    size_t n = co_await t->ReadSome(asio::buffer(buf), ec);
    if (ec) break;
    hello_head.append(reinterpret_cast<const char*>(buf.data()), std::min<size_t>(n, 5 - hello_head.size()));
    size_t used = 0;
    auto o = c->parser.Feed(std::span<const uint8_t>(buf.data(), n), &used);
    if (o == protocol::FrameParser::Outcome::kBad) {
      hello_status = c->parser.error().WithContext("HELLO reply");
      if (hello_head == "HTTP/") {
        hello_status = hello_status.WithContext(
            "the port answered in HTTP: it is a kvstash HTTP port (/metrics), not the protocol port");
      }
      have_hello = true;
      break;
    }
    if (o == protocol::FrameParser::Outcome::kComplete) {
      Frame f = c->parser.TakeFrame();
      have_hello = true;
      if (used != n) hello_status = Status::Corruption("bytes after the HELLO reply");
      else if (f.header.status != 0) {
        hello_status = Status::FromCode(f.header.status, std::string(f.body.begin(), f.body.end()));
      } else if (auto r = protocol::HelloReply::Decode(f.header.flags, f.body); !r.ok()) {
        hello_status = r.status();
      } else if (c->generation == gen) {
        c->max_frame = r->max_frame_body_bytes;
      }
    }
  }
  guard.cancel();
  if (c->generation != gen) co_return;
  if (!have_hello) {
    // A TLS port closes a plain connection without a byte when the handshake fails.
    if (failure.empty() && ec == asio::error::eof && hello_head.empty() && !t->tls) {
      failure = "the server closed the connection without a HELLO reply (if its port speaks "
                "TLS, connect with TLS: ClientOptions::tls, kvstash --tls)";
    }
    const std::string where = "connect to " + HostPort(host, port);
    on_ready(c, gen, *timed_out ? Status::Unavailable(where + " timed out")
                                : Status::Unavailable(where + ": " +
                                                      (failure.empty() ? "" : failure + ": ") +
                                                      ec.message()));
    co_return;
  }
  on_ready(c, gen, hello_status);
  if (!hello_status.ok()) co_return;
  while (c->generation == gen) {
    // Large bodies (GET payloads) are read straight into the frame's buffer.
    if (std::span<uint8_t> tail = c->parser.BodyTail(); tail.size() >= 64 * 1024) {
      size_t n = co_await t->ReadSome(asio::buffer(tail.data(), tail.size()), ec);
      if (c->generation != gen) co_return;
      if (ec) {
        c->peer_timed_out = ec == asio::error::timed_out;
        on_ready(c, gen, Status::Unavailable("connection lost: " + ec.message()));
        co_return;
      }
      auto o = c->parser.CommitBody(n);
      if (o == protocol::FrameParser::Outcome::kBad) {
        on_ready(c, gen, c->parser.error().WithContext("reply stream"));
        co_return;
      }
      if (o == protocol::FrameParser::Outcome::kComplete) on_frame(c, gen, c->parser.TakeFrame());
      continue;
    }
    size_t n = co_await t->ReadSome(asio::buffer(buf), ec);
    if (c->generation != gen) co_return;
    if (ec) {
      c->peer_timed_out = ec == asio::error::timed_out;
      on_ready(c, gen, Status::Unavailable("connection lost: " + ec.message()));
      co_return;
    }
    std::span<const uint8_t> in(buf.data(), n);
    while (!in.empty() && c->generation == gen) {
      size_t used = 0;
      auto o = c->parser.Feed(in, &used);
      in = in.subspan(used);
      if (o == protocol::FrameParser::Outcome::kNeedMore) break;
      if (o == protocol::FrameParser::Outcome::kBad) {
        on_ready(c, gen, c->parser.error().WithContext("reply stream"));
        co_return;
      }
      on_frame(c, gen, c->parser.TakeFrame());
    }
  }
}

}  // namespace

Client::Impl::Impl(ClientOptions o) : opts_(std::move(o)), work_(asio::make_work_guard(ioc_)) {}
Client::Impl::~Impl() = default;

Status Client::Impl::Init() {
  if (opts_.servers.empty()) return Status::InvalidArgument("client needs at least one server");
  if (opts_.tenant.empty() || opts_.tenant.size() > protocol::kMaxTenantBytes) {
    return Status::InvalidArgument("tenant must be 1..255 bytes");
  }
  if (opts_.credential.size() > protocol::kMaxCredentialBytes) {
    return Status::InvalidArgument("credential longer than 4096 bytes");
  }
  if (opts_.connections_per_server == 0 || opts_.max_attempts == 0) {
    return Status::InvalidArgument("connections_per_server and max_attempts must be >= 1");
  }
  if (opts_.client_name.size() > 255) opts_.client_name.resize(255);
  for (const std::string& s : opts_.servers) {
    KVSTASH_ASSIGN_OR_RETURN(auto hp, SplitHostPort(s));
    endpoints_.push_back({hp.first, std::to_string(hp.second)});
  }
  if (opts_.tls.enabled) {
    tls_ctx_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    tls_ctx_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                          asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                          asio::ssl::context::no_tlsv1_1);
    boost::system::error_code ec;
    if (opts_.tls.verify_peer) {
      tls_ctx_->set_verify_mode(asio::ssl::verify_peer, ec);
      if (!ec) {
        if (opts_.tls.ca_file.empty()) tls_ctx_->set_default_verify_paths(ec);
        else tls_ctx_->load_verify_file(opts_.tls.ca_file, ec);
      }
    } else {
      tls_ctx_->set_verify_mode(asio::ssl::verify_none, ec);
    }
    if (ec) {
      return Status::InvalidArgument("TLS CA file \"" + opts_.tls.ca_file + "\": " + ec.message());
    }
  }
  pools_.resize(opts_.servers.size());
  next_conn_.assign(opts_.servers.size(), 0);
  down_until_.assign(opts_.servers.size(), Clock::time_point::min());
  for (size_t s = 0; s < pools_.size(); ++s) {
    for (uint32_t i = 0; i < opts_.connections_per_server; ++i) {
      pools_[s].push_back(
          std::make_unique<Conn>(this, ioc_, tls_ctx_.get(), s, opts_.max_reply_bytes));
    }
  }
  thread_ = std::thread([this] { ioc_.run(); });
  return Status::Ok();
}

void Client::Impl::Stop() {
  asio::post(ioc_, [this] {
    stopped_ = true;
    for (auto& pool : pools_) {
      for (auto& c : pool) {
        ++c->generation;
        c->transport->Close();
        auto pending = std::move(c->pending);
        auto waiting = std::move(c->waiting);
        for (auto& [id, call] : pending) Finish(call, Status::Unavailable("client shut down"));
        for (auto& call : waiting) Finish(call, Status::Unavailable("client shut down"));
      }
    }
    work_.reset();
  });
  if (thread_.joinable()) thread_.join();
}

uint32_t Client::Impl::ReadyMaxFrame(size_t server) {
  std::promise<uint32_t> p;
  asio::post(ioc_, [&] {
    uint32_t best = 0;
    for (const auto& c : pools_[server]) {
      if (c->state == Conn::State::kReady && (best == 0 || c->max_frame < best)) best = c->max_frame;
    }
    p.set_value(best);
  });
  return p.get_future().get();
}

void Client::Impl::Submit(size_t server, Opcode op, uint16_t flags, std::vector<uint8_t> body,
                          const CallOptions& call, FrameDone done) {
  Start({server}, op, flags, std::move(body), call, std::move(done));
}

void Client::Impl::SubmitRouted(const StoredKey& route, Opcode op, uint16_t flags,
                                std::vector<uint8_t> body, const CallOptions& call,
                                FrameDone done) {
  Start(RendezvousOrder(opts_.servers, route), op, flags, std::move(body), call, std::move(done));
}

size_t Client::Impl::PickServer(const Call& c) const {
  if (opts_.down_server_skip.count() > 0) {
    const Clock::time_point now = Clock::now();
    for (size_t s : c.order) {
      if (down_until_[s] <= now) return s;
    }
  }
  return c.order.front();
}

void Client::Impl::Start(std::vector<size_t> order, Opcode op, uint16_t flags,
                         std::vector<uint8_t> body, const CallOptions& call, FrameDone done) {
  auto c = std::make_shared<Call>();
  c->opcode = static_cast<uint8_t>(op);
  c->flags = flags;
  c->body = std::move(body);
  c->order = std::move(order);
  c->server = c->order.front();
  c->deadline = Clock::now() + call.deadline.value_or(opts_.default_deadline);
  c->done = std::move(done);
  asio::post(ioc_, [this, c] {
    if (stopped_) {
      Finish(c, Status::Unavailable("client shut down"));
      return;
    }
    c->deadline_timer = std::make_unique<asio::steady_timer>(ioc_, c->deadline);
    c->deadline_timer->async_wait([this, c](boost::system::error_code ec) {
      if (ec) return;
      std::string msg = std::string(protocol::OpcodeName(c->opcode)) + ": deadline passed after " +
                        std::to_string(c->attempt) + " attempt(s)";
      if (c->conn != nullptr && c->conn->state == Conn::State::kConnecting) {
        const Endpoint& e = endpoints_[c->server];
        msg += " while connecting to " + HostPort(e.host, e.port) +
               " (no HELLO reply yet: the server is unreachable, overloaded or not a kvstash "
               "protocol port)";
      }
      Finish(c, Status::DeadlineExceeded(msg));
    });
    Send(c);
  });
}

void Client::Impl::Send(const CallPtr& c) {
  if (c->finished) return;
  ++c->attempt;
  c->server = PickServer(*c);
  auto& pool = pools_[c->server];
  // Prefer a ready connection, round robin.
  Conn* conn = nullptr;
  for (size_t i = 0; i < pool.size() && !conn; ++i) {
    Conn* cand = pool[(next_conn_[c->server] + i) % pool.size()].get();
    if (cand->state == Conn::State::kReady) conn = cand;
  }
  if (!conn) conn = pool[next_conn_[c->server] % pool.size()].get();
  next_conn_[c->server]++;
  c->conn = conn;
  if (conn->state != Conn::State::kReady) {
    conn->waiting.push_back(c);
    if (conn->state == Conn::State::kIdle) {
      conn->state = Conn::State::kConnecting;
      const uint64_t gen = ++conn->generation;
      conn->transport->Close();
      conn->transport = std::make_shared<Transport>(ioc_, tls_ctx_.get());
      conn->max_frame = std::numeric_limits<uint32_t>::max();
      conn->peer_timed_out = false;
      conn->parser = protocol::FrameParser(opts_.max_reply_bytes,
                                           protocol::FrameParser::Direction::kReplies);
      conn->outq.clear();
      conn->writing = false;
      protocol::HelloRequest hello{protocol::kProtocolVersion, opts_.tenant, opts_.credential,
                                   opts_.client_name};
      std::vector<uint8_t> body, frame;
      hello.Encode(&body);
      protocol::AppendFrame(protocol::FrameHeader{.opcode = static_cast<uint8_t>(Opcode::kHello),
                                                  .request_id = 0},
                            body, &frame);
      auto on_state = [this](Conn* k, uint64_t g, Status s) {
        if (k->generation != g) return;
        if (s.ok()) {
          k->state = Conn::State::kReady;
          down_until_[k->server] = Clock::time_point::min();
          auto waiting = std::move(k->waiting);
          k->waiting.clear();
          for (auto& w : waiting) {
            if (w->finished) continue;
            --w->attempt;  // the attempt is made now, on the ready connection
            Send(w);
          }
          return;
        }
        // Connection failed or was lost: every call on it fails this attempt. A failed
        // connect, or a connection whose peer stopped acknowledging (its host is gone),
        // marks the server down, so that the retries of routed calls fail over (a
        // rejected HELLO is not a down server; another lost connection is retried first).
        if ((k->state == Conn::State::kConnecting || k->peer_timed_out) && s.IsRetryable()) {
          down_until_[k->server] = Clock::now() + opts_.down_server_skip;
        }
        ++k->generation;
        k->state = Conn::State::kIdle;
        k->transport->Close();
        auto pending = std::move(k->pending);
        auto waiting = std::move(k->waiting);
        k->pending.clear();
        k->waiting.clear();
        k->outq.clear();
        k->writing = false;
        // A rejected HELLO is final (PermissionDenied, NotSupported); others retry.
        for (auto& [id, call] : pending) AttemptFailed(call, s);
        for (auto& call : waiting) AttemptFailed(call, s);
      };
      auto on_frame = [this](Conn* k, uint64_t, Frame f) {
        auto it = k->pending.find(f.header.request_id);
        if (it == k->pending.end()) return;  // its call already finished (deadline)
        CallPtr call = it->second;
        k->pending.erase(it);
        if (f.header.status == 0) {
          Finish(call, std::move(f));
          return;
        }
        Status s = Status::FromCode(f.header.status, std::string(f.body.begin(), f.body.end()));
        if (s.IsRetryable()) AttemptFailed(call, s);
        else Finish(call, s);
      };
      asio::co_spawn(ioc_,
                     ConnectAndServe(conn, conn->transport, gen, endpoints_[c->server].host,
                                     endpoints_[c->server].port,
                                     opts_.tls.server_name.empty() ? endpoints_[c->server].host
                                                                   : opts_.tls.server_name,
                                     opts_.tls.verify_peer,
                                     std::string(frame.begin(), frame.end()),
                                     opts_.connect_timeout, opts_.unacked_timeout, on_state,
                                     on_frame),
                     [](std::exception_ptr e) { LogFailure("client connection", e); });
    }
    return;
  }
  if (c->body.size() > conn->max_frame) {
    Finish(c, Status::InvalidArgument(
                  std::string(protocol::OpcodeName(c->opcode)) + " request of " +
                  std::to_string(c->body.size()) + " bytes exceeds the server's max_frame_bytes " +
                  std::to_string(conn->max_frame) + " (not sent)"));
    return;
  }
  c->request_id = conn->next_id++;
  conn->pending[c->request_id] = c;
  std::vector<uint8_t> frame;
  protocol::AppendFrame(protocol::FrameHeader{.opcode = c->opcode, .flags = c->flags,
                                              .request_id = c->request_id},
                        c->body, &frame);
  conn->outq.push_back(std::move(frame));
  // Writer: one async_write at a time, batching whatever is queued.
  struct Writer {
    static void Pump(Client::Impl* self, Conn* k) {
      if (k->writing || k->outq.empty() || k->state != Conn::State::kReady) return;
      k->writing = true;
      auto batch = std::make_shared<std::vector<std::vector<uint8_t>>>();
      while (!k->outq.empty() && batch->size() < 64) {
        batch->push_back(std::move(k->outq.front()));
        k->outq.pop_front();
      }
      std::vector<asio::const_buffer> bufs;
      for (auto& b : *batch) bufs.emplace_back(b.data(), b.size());
      const uint64_t gen = k->generation;
      auto t = k->transport;
      t->AsyncWriteAll(bufs, [self, k, t, batch, gen](boost::system::error_code ec, size_t) {
        if (k->generation != gen) return;
        k->writing = false;
        if (ec) {
          t->Close();  // the reader reports the loss and fails the calls
          return;
        }
        Pump(self, k);
      });
    }
  };
  Writer::Pump(this, conn);
}

void Client::Impl::AttemptFailed(const CallPtr& c, Status s) {
  if (c->finished) return;
  if (!s.IsRetryable() || c->attempt >= opts_.max_attempts) {
    Finish(c, s);
    return;
  }
  if (PickServer(*c) != c->server) {  // failover: another server, no backoff
    asio::post(ioc_, [this, c] { Send(c); });
    return;
  }
  const uint32_t shift = std::min<uint32_t>(c->attempt - 1, 20);
  auto backoff = std::min<std::chrono::milliseconds>(opts_.max_backoff, opts_.initial_backoff * (1u << shift));
  const double jitter = 0.5 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng_);
  const auto wait = std::chrono::duration_cast<Clock::duration>(backoff * jitter);
  if (Clock::now() + wait >= c->deadline) {
    Finish(c, Status::DeadlineExceeded("deadline passes before the next retry; last error: " +
                                       s.ToString()));
    return;
  }
  c->backoff_timer = std::make_unique<asio::steady_timer>(ioc_, wait);
  c->backoff_timer->async_wait([this, c](boost::system::error_code ec) {
    if (!ec) Send(c);
  });
}

void Client::Impl::Finish(const CallPtr& c, Result<Frame> r) {
  if (c->finished) return;
  c->finished = true;
  if (c->deadline_timer) c->deadline_timer->cancel();
  if (c->backoff_timer) c->backoff_timer->cancel();
  if (c->conn) c->conn->pending.erase(c->request_id);
  auto done = std::move(c->done);
  done(std::move(r));
}

}  // namespace kvstash
