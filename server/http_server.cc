#include "server/http_server.h"

#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fstream>
#include <sstream>

#include "common/logging.h"

namespace kvstash::server {
namespace {

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
  if (req.method() != http::verb::head) res.body() = std::move(body);
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
  if (target == "/healthz") {
    if (src.draining()) return Respond(req, http::status::service_unavailable, "text/plain", "draining\n");
    return Respond(req, http::status::ok, "text/plain", "ok\n");
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

awaitable<void> Session(tcp::socket socket, std::shared_ptr<HttpSources> src) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  while (true) {
    http::request<http::string_body> req;
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 * 1024);
    stream.expires_after(std::chrono::seconds(30));
    boost::system::error_code ec;
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) break;
    req = parser.release();
    auto res = Route(req, *src);
    const bool keep = res.keep_alive();
    stream.expires_after(std::chrono::seconds(30));
    co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
    if (ec || !keep) break;
  }
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

awaitable<void> Accept(std::shared_ptr<tcp::acceptor> acceptor, std::shared_ptr<HttpSources> src) {
  while (true) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor->async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acceptor->is_open()) co_return;
      KVSTASH_LOG_WARN("HTTP accept failed: {}", ec.message());
      continue;
    }
    auto ex = socket.get_executor();
    asio::co_spawn(ex, Session(std::move(socket), src), [](std::exception_ptr e) {
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

void HttpServer::Stop() {
  auto acc = acceptor_;
  if (!acc) return;
  asio::post(ioc_, [acc] {
    boost::system::error_code ec;
    acc->close(ec);
  });
}

}  // namespace kvstash::server
