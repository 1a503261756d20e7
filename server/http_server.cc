#include "server/http_server.h"

#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace kvstash::server {
namespace {

constexpr uint32_t kHttpHeaderLimit = 16 * 1024;
constexpr uint32_t kHttpBodyLimit = 64 * 1024;
// Pause after a failed accept (e.g. out of descriptors) so the loop does not spin.
constexpr std::chrono::milliseconds kAcceptRetryPause{50};

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  *ok = static_cast<bool>(in);
  return ss.str();
}

http::response<http::string_body> Respond(const http::request<http::string_body>& req,
                                          http::status status, std::string content_type,
                                          std::string body) {
  http::response<http::string_body> res{status, req.version()};
  res.set(http::field::server, "kvstash");
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-store");
  res.keep_alive(req.keep_alive());
  if (req.method() == http::verb::head) {
    // RFC 9110 §9.3.2: the headers a GET would carry, Content-Length included, no body.
    res.content_length(body.size());
    return res;
  }
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

http::response<http::string_body> Route(const http::request<http::string_body>& req,
                                        const HttpSources& src) {
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    return Respond(req, http::status::method_not_allowed, "text/plain", "GET only\n");
  }
  std::string target(req.target());
  if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
  if (target == "/metrics") {
    return Respond(req, http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                   src.metrics_text());
  }
  if (target == "/v1/stats") return Respond(req, http::status::ok, "application/json", src.stats_json());
  if (target == "/v1/history") {
    return Respond(req, http::status::ok, "application/json", src.history_json());
  }
  if (target == "/healthz") {
    const std::string detail = src.health_detail ? src.health_detail() : "";
    if (src.draining()) {
      return Respond(req, http::status::service_unavailable, "text/plain", "draining\n" + detail);
    }
    return Respond(req, http::status::ok, "text/plain", "ok\n" + detail);
  }
  if (target == "/dashboard" || target == "/dashboard/") {
    return Respond(req, http::status::ok, "text/html; charset=utf-8", kDashboardHtml);
  }
  if (target == "/dashboard/dashboard.js") {
    return Respond(req, http::status::ok, "application/javascript", kDashboardJs);
  }
  if (target == "/dashboard/chart.min.js") {
    bool ok = false;
    std::string js = ReadFile(src.chart_js_path, &ok);
    if (!ok) {
      return Respond(req, http::status::not_found, "text/plain",
                     "Chart.js not found at " + src.chart_js_path +
                         " (install Debian's libjs-chart.js)\n");
    }
    return Respond(req, http::status::ok, "application/javascript", std::move(js));
  }
  return Respond(req, http::status::not_found, "text/plain", "not found\n");
}

// The answer to a request that could not be read: it broke a limit (RFC 6585 §5: 431
// for the header, RFC 9110 §15.5.14: 413 for the body) or is not HTTP/1.x (400); nothing
// when the connection ended or timed out (no one to answer).
std::optional<http::response<http::string_body>> ReadErrorResponse(boost::system::error_code ec) {
  http::status status;
  std::string body;
  if (!ec || ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == http::error::need_more || ec == http::error::need_buffer) {
    return std::nullopt;
  }
  if (ec == http::error::header_limit) {
    status = http::status::request_header_fields_too_large;
    body = "request header larger than " + std::to_string(kHttpHeaderLimit) + " bytes\n";
  } else if (ec == http::error::body_limit) {
    status = http::status::payload_too_large;
    body = "request body larger than " + std::to_string(kHttpBodyLimit) + " bytes\n";
  } else if (ec.category() == http::make_error_code(http::error::bad_method).category()) {
    status = http::status::bad_request;
    body = "malformed HTTP request: " + ec.message() + "\n";
  } else {
    return std::nullopt;
  }
  http::response<http::string_body> res{status, 11};
  res.set(http::field::server, "kvstash");
  res.set(http::field::content_type, "text/plain");
  res.set(http::field::connection, "close");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

// One HTTP connection. `stream` is touched only on the session's strand (its socket's
// executor); `waiting_since_ns` and `evicted` are read by the acceptor's thread.
struct HttpSession {
  explicit HttpSession(tcp::socket socket) : stream(std::move(socket)) {}
  beast::tcp_stream stream;
  // steady_clock time (ns) at which the session began waiting for its next request; 0
  // while it handles one (route and reply). Accept time at first.
  std::atomic<int64_t> waiting_since_ns{NowNs()};
  // Set when the table dropped the session to make room: it closes at once if waiting,
  // else after the reply in progress.
  std::atomic<bool> evicted{false};

  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

// The open HTTP sessions, at most kMaxHttpConnections. A session over the cap takes
// the place of the one that has waited longest for a request (least recently used):
// idle keep-alive connections, however many, cannot keep a health probe out, since a
// probe sends its request at once and is never the longest waiting.
// Thread-safety: every method may be called from any thread.
class HttpSessionTable {
 public:
  // Adds `s`. When the table is full, drops the session waiting longest and closes it
  // on its strand (or after its current reply). Returns false, adding nothing, when
  // every session is handling a request.
  bool Admit(const std::shared_ptr<HttpSession>& s) KVSTASH_EXCLUDES(mu_) {
    std::shared_ptr<HttpSession> victim;
    {
      MutexLock lock(mu_);
      if (sessions_.size() >= static_cast<size_t>(kMaxHttpConnections)) {
        auto oldest = sessions_.end();
        int64_t oldest_ns = 0;
        for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
          const int64_t since = (*it)->waiting_since_ns.load(std::memory_order_relaxed);
          if (since != 0 && (oldest == sessions_.end() || since < oldest_ns)) {
            oldest = it;
            oldest_ns = since;
          }
        }
        if (oldest == sessions_.end()) return false;
        victim = std::move(*oldest);
        *oldest = std::move(sessions_.back());
        sessions_.pop_back();
      }
      sessions_.push_back(s);
    }
    if (victim) {
      victim->evicted = true;
      asio::post(victim->stream.get_executor(), [victim] {
        // On the victim's strand: a session still waiting for a request is closed now
        // (its read ends with operation_aborted); one handling a request ends after it.
        if (victim->waiting_since_ns.load() != 0) victim->stream.close();
      });
    }
    return true;
  }

  // Removes `s` when its session ends (nothing when it was evicted).
  void Remove(const HttpSession* s) KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (auto& e : sessions_) {
      if (e.get() != s) continue;
      e = std::move(sessions_.back());
      sessions_.pop_back();
      return;
    }
  }

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<HttpSession>> sessions_ KVSTASH_GUARDED_BY(mu_);
};

// Serves `session` until it closes, an error, 30 s without a request, or its eviction
// from `table`.
awaitable<void> Session(std::shared_ptr<HttpSession> session, std::shared_ptr<HttpSources> src,
                        std::shared_ptr<HttpSessionTable> table) {
  struct Leave {  // the table forgets the session however the coroutine ends
    ~Leave() { table->Remove(session); }
    HttpSessionTable* table;
    const HttpSession* session;
  } leave{table.get(), session.get()};
  beast::tcp_stream& stream = session->stream;
  beast::flat_buffer buffer;
  while (!session->evicted) {
    http::request<http::string_body> req;
    http::request_parser<http::string_body> parser;
    parser.header_limit(kHttpHeaderLimit);
    parser.body_limit(kHttpBodyLimit);
    stream.expires_after(std::chrono::seconds(30));
    session->waiting_since_ns = HttpSession::NowNs();
    boost::system::error_code ec;
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    session->waiting_since_ns = 0;
    if (auto res = ReadErrorResponse(ec)) {
      stream.expires_after(std::chrono::seconds(5));
      co_await http::async_write(stream, *res, asio::redirect_error(use_awaitable, ec));
      // Lingering close: closing with the rest of the request unread would reset the
      // connection and could destroy the reply before the client reads it; read and
      // drop what the client still sends (bounded in bytes and time) first.
      stream.socket().shutdown(tcp::socket::shutdown_send, ec);
      std::array<char, 16384> sink;
      size_t dropped = 0;
      while (!ec && dropped < (4u << 20)) {
        dropped += co_await stream.async_read_some(asio::buffer(sink),
                                                   asio::redirect_error(use_awaitable, ec));
      }
      co_return;
    }
    if (ec) break;
    req = parser.release();
    auto res = Route(req, *src);
    if (session->evicted) res.keep_alive(false);
    const bool keep = res.keep_alive();
    stream.expires_after(std::chrono::seconds(30));
    co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
    if (ec || !keep) break;
  }
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

awaitable<void> Accept(std::shared_ptr<tcp::acceptor> acceptor, std::shared_ptr<HttpSources> src) {
  auto table = std::make_shared<HttpSessionTable>();
  while (true) {
    boost::system::error_code ec;
    // Each session on its own strand, so the table can close it from another thread.
    tcp::socket socket = co_await acceptor->async_accept(
        asio::make_strand(acceptor->get_executor()), asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acceptor->is_open()) co_return;
      KVSTASH_LOG_WARN("HTTP accept failed: {}", ec.message());
      asio::steady_timer pause(acceptor->get_executor(), kAcceptRetryPause);
      co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    auto session = std::make_shared<HttpSession>(std::move(socket));
    if (!table->Admit(session)) {
      KVSTASH_LOG_DEBUG("HTTP connection refused: {} open, each handling a request", kMaxHttpConnections);
      session->stream.close();
      continue;
    }
    auto ex = session->stream.get_executor();
    asio::co_spawn(ex, Session(std::move(session), src, table), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        KVSTASH_LOG_ERROR("HTTP session ended with an exception: {}", ex.what());
      }
    });
  }
}

}  // namespace

HttpServer::HttpServer(asio::io_context& ioc, HttpSources sources)
    : ioc_(ioc), sources_(std::make_shared<HttpSources>(std::move(sources))) {}

Status HttpServer::Listen(const std::string& address, uint16_t port) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(address, ec);
  if (ec) return Status::InvalidArgument("bad listen address " + address);
  acceptor_ = std::make_shared<tcp::acceptor>(ioc_);
  tcp::endpoint ep(addr, port);
  acceptor_->open(ep.protocol(), ec);
  if (!ec) acceptor_->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_->bind(ep, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IOError("HTTP port " + std::to_string(port) + ": " + ec.message());
  port_ = acceptor_->local_endpoint().port();
  asio::co_spawn(ioc_, Accept(acceptor_, sources_), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      KVSTASH_LOG_ERROR("HTTP acceptor ended with an exception: {}", ex.what());
    }
  });
  return Status::Ok();
}

void HttpServer::CloseNow() {
  if (!acceptor_) return;
  boost::system::error_code ec;
  acceptor_->close(ec);
}

void HttpServer::Stop() {
  auto acc = acceptor_;
  if (!acc) return;
  asio::post(ioc_, [acc] {
    boost::system::error_code ec;
    acc->close(ec);
  });
}

}  // namespace kvstash::server
