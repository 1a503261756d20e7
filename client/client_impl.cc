// The call logic of kvstash::Client (client_impl.h).
#include "client/client_impl.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <future>

#include "protocol/messages.h"

namespace kvstash {

namespace asio = boost::asio;
using client_detail::ClientConnectionOptions;
using client_detail::Clock;
using protocol::Frame;
using protocol::Opcode;

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
  std::vector<std::pair<std::string, uint16_t>> endpoints;
  for (const std::string& s : opts_.servers) {
    KVSTASH_ASSIGN_OR_RETURN(auto hp, SplitHostPort(s));
    endpoints.push_back(std::move(hp));
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
  std::vector<uint8_t> hello_body, hello_frame;
  protocol::HelloRequest{protocol::kProtocolVersion, opts_.tenant, opts_.credential,
                         opts_.client_name}
      .Encode(&hello_body);
  protocol::AppendFrame(
      protocol::FrameHeader{.opcode = static_cast<uint8_t>(Opcode::kHello), .request_id = 0},
      hello_body, &hello_frame);
  const client_detail::ClientConnectionEvents events{
      [this](ClientConnection* k, Status s) { OnConnectionState(k, std::move(s)); },
      [this](ClientConnection* k, Frame f) { OnReply(k, std::move(f)); }};
  pools_.resize(opts_.servers.size());
  next_conn_.assign(opts_.servers.size(), 0);
  down_until_.assign(opts_.servers.size(), Clock::time_point::min());
  for (size_t s = 0; s < pools_.size(); ++s) {
    auto options = std::make_shared<ClientConnectionOptions>();
    options->host = endpoints[s].first;
    options->port = std::to_string(endpoints[s].second);
    options->tls_name = opts_.tls.server_name.empty() ? options->host : opts_.tls.server_name;
    options->tls_verify = opts_.tls.verify_peer;
    options->hello_frame = hello_frame;
    options->hello_identity = "tenant '" + opts_.tenant + "', " +
                              (opts_.credential.empty() ? "no credential given" : "a credential given");
    options->max_reply_bytes = opts_.max_reply_bytes;
    options->connect_timeout = opts_.connect_timeout;
    options->unacked_timeout = opts_.unacked_timeout;
    for (uint32_t i = 0; i < opts_.connections_per_server; ++i) {
      pools_[s].push_back(
          std::make_unique<ClientConnection>(ioc_, tls_ctx_.get(), s, options, events));
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
        for (auto& call : c->Close()) Finish(call, Status::Unavailable("client shut down"));
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
      if (c->state() == ClientConnection::State::kReady && (best == 0 || c->max_frame() < best)) {
        best = c->max_frame();
      }
    }
    p.set_value(best);
  });
  return p.get_future().get();
}

void Client::Impl::Submit(size_t server, Opcode op, uint16_t flags, std::vector<uint8_t> body,
                          const CallOptions& call, client_detail::FrameDone done) {
  Start({server}, op, flags, std::move(body), call, std::move(done));
}

void Client::Impl::SubmitRouted(const StoredKey& route, Opcode op, uint16_t flags,
                                std::vector<uint8_t> body, const CallOptions& call,
                                client_detail::FrameDone done) {
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
                         std::vector<uint8_t> body, const CallOptions& call,
                         client_detail::FrameDone done) {
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
      if (c->conn != nullptr && c->conn->state() == ClientConnection::State::kConnecting) {
        msg += " while connecting to " + c->conn->address() +
               " (no HELLO reply yet: the server is unreachable, overloaded or not a kvstash "
               "protocol port)";
      }
      Finish(c, Status::DeadlineExceeded(msg));
    });
    Send(c);
  });
}

client_detail::ClientConnection* Client::Impl::PickConnection(size_t server) {
  auto& pool = pools_[server];
  ClientConnection* conn = nullptr;
  for (size_t i = 0; i < pool.size() && !conn; ++i) {
    ClientConnection* cand = pool[(next_conn_[server] + i) % pool.size()].get();
    if (cand->state() == ClientConnection::State::kReady) conn = cand;
  }
  if (!conn) conn = pool[next_conn_[server] % pool.size()].get();
  next_conn_[server]++;
  return conn;
}

void Client::Impl::Send(const CallPtr& c) {
  if (c->finished) return;
  ++c->attempt;
  c->server = PickServer(*c);
  ClientConnection* conn = PickConnection(c->server);
  c->conn = conn;
  if (conn->state() != ClientConnection::State::kReady) {
    conn->Wait(c);
    if (conn->state() == ClientConnection::State::kIdle) conn->Connect();
    return;
  }
  if (c->body.size() > conn->max_frame()) {
    Finish(c, Status::InvalidArgument(
                  std::string(protocol::OpcodeName(c->opcode)) + " request of " +
                  std::to_string(c->body.size()) + " bytes exceeds the server's max_frame_bytes " +
                  std::to_string(conn->max_frame()) + " (not sent)"));
    return;
  }
  conn->Send(c);
}

void Client::Impl::OnConnectionState(ClientConnection* k, Status s) {
  if (s.ok()) {
    down_until_[k->server()] = Clock::time_point::min();
    for (auto& w : k->TakeWaiting()) {
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
  if ((k->state() == ClientConnection::State::kConnecting || k->peer_timed_out()) &&
      s.IsRetryable()) {
    down_until_[k->server()] = Clock::now() + opts_.down_server_skip;
  }
  // A rejected HELLO is final (PermissionDenied, NotSupported); others retry.
  for (auto& call : k->Fail()) AttemptFailed(call, s);
}

void Client::Impl::OnReply(ClientConnection* k, Frame f) {
  CallPtr call = k->TakePending(f.header.request_id);
  if (!call) return;  // its call already finished (deadline)
  if (f.header.status == 0) {
    Finish(call, std::move(f));
    return;
  }
  Status s = Status::FromCode(f.header.status, std::string(f.body.begin(), f.body.end()));
  if (s.IsRetryable()) AttemptFailed(call, s);
  else Finish(call, s);
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
  if (c->conn) c->conn->Forget(c->request_id);
  auto done = std::move(c->done);
  done(std::move(r));
}

}  // namespace kvstash
