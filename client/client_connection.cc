#include "client/client_connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <span>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/logging.h"
#include "protocol/messages.h"

namespace kvstash::client_detail {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::FrameParser;

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

namespace {

// Logs a coroutine that ended with an exception (never co_spawn detached silently).
void LogFailure(const char* what, std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    KVSTASH_LOG_ERROR("{} ended with an exception: {}", what, ex.what());
  }
}

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

}  // namespace

ClientConnection::ClientConnection(asio::io_context& ioc, asio::ssl::context* tls_ctx, size_t server,
                                   std::shared_ptr<const ClientConnectionOptions> options,
                                   ClientConnectionEvents events)
    : ioc_(ioc),
      tls_ctx_(tls_ctx),
      server_(server),
      options_(std::move(options)),
      events_(std::move(events)),
      transport_(std::make_shared<Transport>(ioc, tls_ctx)),
      parser_(options_->max_reply_bytes, FrameParser::Direction::kReplies),
      probe_timer_(ioc) {}

ClientConnection::~ClientConnection() = default;

std::string ClientConnection::address() const {
  const std::string& host = options_->host;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + options_->port;
}

void ClientConnection::Connect() {
  state_ = State::kConnecting;
  const uint64_t gen = ++generation_;
  transport_->Close();
  transport_ = std::make_shared<Transport>(ioc_, tls_ctx_);
  max_frame_ = std::numeric_limits<uint32_t>::max();
  peer_timed_out_ = false;
  parser_ = FrameParser(options_->max_reply_bytes, FrameParser::Direction::kReplies);
  outq_.clear();
  writing_ = false;
  probe_timer_.cancel();
  probe_armed_ = false;
  asio::co_spawn(ioc_, Run(gen, transport_),
                 [](std::exception_ptr e) { LogFailure("client connection", e); });
}

void ClientConnection::Wait(CallPtr call) { waiting_.push_back(std::move(call)); }

std::vector<CallPtr> ClientConnection::TakeWaiting() {
  std::vector<CallPtr> out = std::move(waiting_);
  waiting_.clear();
  return out;
}

void ClientConnection::Send(CallPtr call) {
  call->request_id = next_id_++;
  if (pending_.empty()) quiet_since_ = Clock::now();
  Queue(call->opcode, call->flags, call->request_id, call->body);
  pending_[call->request_id] = std::move(call);
  ArmProbe();
}

void ClientConnection::Queue(uint8_t opcode, uint16_t flags, uint64_t request_id,
                             std::span<const uint8_t> body) {
  std::vector<uint8_t> frame;
  protocol::AppendFrame(protocol::FrameHeader{.opcode = opcode, .flags = flags, .request_id = request_id},
                        body, &frame);
  outq_.push_back(std::move(frame));
  Pump();
}

void ClientConnection::ArmProbe() {
  const auto period = options_->unacked_timeout;
  if (probe_armed_ || period.count() <= 0) return;
  probe_armed_ = true;
  probe_timer_.expires_at(quiet_since_ + period);
  const uint64_t gen = generation_;
  probe_timer_.async_wait([this, gen](boost::system::error_code ec) {
    if (ec) return;  // cancelled: a reconnect, Fail() or Close() owns the state now
    OnProbeTimer(gen);
  });
}

void ClientConnection::OnProbeTimer(uint64_t gen) {
  if (generation_ != gen) return;
  probe_armed_ = false;
  if (pending_.empty() || state_ != State::kReady) return;
  const auto now = Clock::now();
  if (now - quiet_since_ >= options_->unacked_timeout) {
    // Its reply matches no pending call and is dropped (Client::Impl::OnReply).
    Queue(static_cast<uint8_t>(protocol::Opcode::kPing), 0, next_id_++, {});
    quiet_since_ = now;
  }
  ArmProbe();
}

CallPtr ClientConnection::TakePending(uint64_t request_id) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return nullptr;
  CallPtr call = std::move(it->second);
  pending_.erase(it);
  return call;
}

std::vector<CallPtr> ClientConnection::Close() {
  ++generation_;
  transport_->Close();
  probe_timer_.cancel();
  probe_armed_ = false;
  std::vector<CallPtr> calls;
  for (auto& [id, call] : pending_) calls.push_back(std::move(call));
  pending_.clear();
  for (auto& call : TakeWaiting()) calls.push_back(std::move(call));
  return calls;
}

std::vector<CallPtr> ClientConnection::Fail() {
  state_ = State::kIdle;
  std::vector<CallPtr> calls = Close();
  outq_.clear();
  writing_ = false;
  return calls;
}

void ClientConnection::Report(uint64_t gen, Status s) {
  if (generation_ != gen) return;
  if (s.ok()) state_ = State::kReady;
  events_.on_state(this, std::move(s));
}

void ClientConnection::Pump() {
  if (writing_ || outq_.empty() || state_ != State::kReady) return;
  writing_ = true;
  auto batch = std::make_shared<std::vector<std::vector<uint8_t>>>();
  while (!outq_.empty() && batch->size() < 64) {
    batch->push_back(std::move(outq_.front()));
    outq_.pop_front();
  }
  std::vector<asio::const_buffer> bufs;
  for (auto& b : *batch) bufs.emplace_back(b.data(), b.size());
  const uint64_t gen = generation_;
  auto t = transport_;
  t->AsyncWriteAll(bufs, [this, t, batch, gen](boost::system::error_code ec, size_t) {
    if (generation_ != gen) return;
    writing_ = false;
    if (ec) {
      t->Close();  // the reader reports the loss and fails the calls
      return;
    }
    Pump();
  });
}

asio::awaitable<void> ClientConnection::Run(uint64_t gen, std::shared_ptr<Transport> t) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer guard(ex);
  guard.expires_after(options_->connect_timeout);
  auto timed_out = std::make_shared<bool>(false);
  guard.async_wait([t, timed_out](boost::system::error_code ec) {
    if (ec) return;
    *timed_out = true;
    t->Close();
  });
  boost::system::error_code ec;
  std::string failure;  // what failed, for the error message
  co_await Open(*t, failure, ec);
  if (!ec) co_await t->WriteAll(asio::buffer(options_->hello_frame), ec);
  std::vector<uint8_t> buf(256 * 1024);
  std::string hello_head;  // the HELLO reply's first 5 bytes ("HTTP/" from an HTTP port)
  Status hello_status = Status::Ok();
  bool have_hello = false;
  if (!ec) have_hello = co_await ReadHello(gen, *t, buf, hello_head, &hello_status, ec);
  guard.cancel();
  if (generation_ != gen) co_return;
  if (!have_hello) {
    // A TLS port closes a plain connection without a byte when the handshake fails.
    if (failure.empty() && ec == asio::error::eof && hello_head.empty() && !t->tls) {
      failure = "the server closed the connection without a HELLO reply (if its port speaks "
                "TLS, connect with TLS: ClientOptions::tls, kvstash --tls)";
    }
    const std::string where = "connect to " + address();
    Report(gen, *timed_out ? Status::Unavailable(where + " timed out")
                           : Status::Unavailable(where + ": " +
                                                 (failure.empty() ? "" : failure + ": ") +
                                                 ec.message()));
    co_return;
  }
  Report(gen, hello_status);
  if (!hello_status.ok()) co_return;
  co_await Serve(gen, *t, buf);
}

asio::awaitable<void> ClientConnection::Open(Transport& t, std::string& failure,
                                             boost::system::error_code& ec) {
  const ClientConnectionOptions& o = *options_;
  tcp::resolver resolver(co_await asio::this_coro::executor);
  auto results = co_await resolver.async_resolve(o.host, o.port, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) co_await asio::async_connect(t.lowest(), results, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) t.lowest().set_option(tcp::no_delay(true), ec);
  if (!ec && o.unacked_timeout.count() > 0) {
    // Sent bytes the peer's host does not acknowledge this long abort the connection
    // (ETIMEDOUT): a host that vanished is noticed (ClientOptions::unacked_timeout).
    const unsigned int ms = static_cast<unsigned int>(o.unacked_timeout.count());
    if (setsockopt(t.lowest().native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &ms,
                   sizeof(ms)) != 0) {
      KVSTASH_LOG_WARN("TCP_USER_TIMEOUT not set on the connection to {}:{}", o.host, o.port);
    }
  }
  if (ec || !t.tls) co_return;
  if (!SetTlsName(*t.tls, o.tls_name, o.tls_verify)) {
    ec = asio::error::invalid_argument;
    failure = "TLS server name " + o.tls_name;
    co_return;
  }
  co_await t.tls->async_handshake(asio::ssl::stream_base::client,
                                  asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) co_return;
  const long verify = SSL_get_verify_result(t.tls->native_handle());
  failure = "TLS handshake";
  if (verify != X509_V_OK) {
    failure += std::string(" (certificate: ") + X509_verify_cert_error_string(verify) + ")";
  } else {
    failure += " (does the server's port speak TLS? A plain port answers a TLS hello with a "
               "kvstash error frame)";
  }
}

asio::awaitable<bool> ClientConnection::ReadHello(uint64_t gen, Transport& t,
                                                  std::vector<uint8_t>& buf, std::string& head,
                                                  Status* status, boost::system::error_code& ec) {
  while (true) {
    size_t n = co_await t.ReadSome(asio::buffer(buf), ec);
    if (ec) co_return false;
    head.append(reinterpret_cast<const char*>(buf.data()), std::min<size_t>(n, 5 - head.size()));
    size_t used = 0;
    auto o = parser_.Feed(std::span<const uint8_t>(buf.data(), n), &used);
    if (o == FrameParser::Outcome::kBad) {
      *status = parser_.error().WithContext("HELLO reply");
      if (head == "HTTP/") {
        *status = status->WithContext(
            "the port answered in HTTP: it is a kvstash HTTP port (/metrics), not the protocol port");
      }
      co_return true;
    }
    if (o != FrameParser::Outcome::kComplete) continue;
    protocol::Frame f = parser_.TakeFrame();
    if (used != n) *status = Status::Corruption("bytes after the HELLO reply");
    else if (f.header.status != 0) {
      *status = Status::FromCode(f.header.status, std::string(f.body.begin(), f.body.end()));
      if (status->code() == Status::Code::kPermissionDenied && !options_->hello_identity.empty()) {
        *status = status->WithContext("HELLO as " + options_->hello_identity);
      }
    } else if (auto r = protocol::HelloReply::Decode(f.header.flags, f.body); !r.ok()) {
      *status = r.status();
    } else if (generation_ == gen) {
      max_frame_ = r->max_frame_body_bytes;
    }
    co_return true;
  }
}

asio::awaitable<void> ClientConnection::Serve(uint64_t gen, Transport& t,
                                              std::vector<uint8_t>& buf) {
  boost::system::error_code ec;
  while (generation_ == gen) {
    // Large bodies (GET payloads) are read straight into the frame's buffer.
    const std::span<uint8_t> tail = parser_.BodyTail();
    const bool direct = tail.size() >= 64 * 1024;
    size_t n = direct ? co_await t.ReadSome(asio::buffer(tail.data(), tail.size()), ec)
                      : co_await t.ReadSome(asio::buffer(buf), ec);
    if (generation_ != gen) co_return;
    quiet_since_ = Clock::now();
    if (ec) {
      peer_timed_out_ = ec == asio::error::timed_out;
      Report(gen, Status::Unavailable("connection lost: " + ec.message()));
      co_return;
    }
    if (direct) {
      auto o = parser_.CommitBody(n);
      if (o == FrameParser::Outcome::kBad) {
        Report(gen, parser_.error().WithContext("reply stream"));
        co_return;
      }
      if (o == FrameParser::Outcome::kComplete) events_.on_frame(this, parser_.TakeFrame());
      continue;
    }
    std::span<const uint8_t> in(buf.data(), n);
    while (!in.empty() && generation_ == gen) {
      size_t used = 0;
      auto o = parser_.Feed(in, &used);
      in = in.subspan(used);
      if (o == FrameParser::Outcome::kNeedMore) break;
      if (o == FrameParser::Outcome::kBad) {
        Report(gen, parser_.error().WithContext("reply stream"));
        co_return;
      }
      events_.on_frame(this, parser_.TakeFrame());
    }
  }
}

}  // namespace kvstash::client_detail
