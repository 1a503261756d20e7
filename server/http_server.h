// The HTTP port (Boost.Beast): operators' view of a running server.
//
//   GET /metrics                 Prometheus text exposition 0.0.4 (metrics.h)
//   GET /v1/stats                the stats JSON document (docs/protocol.md §8)
//   GET /v1/history              the server's samples of its headline numbers
//                                (server/stats_history.h)
//   GET /healthz                 "ok" while serving, 503 "draining" during shutdown;
//                                then one line per degraded part ("T2 down ...")
//   GET /dashboard               live dashboard page (server/web/dashboard.html)
//   GET /dashboard/dashboard.js  its script (server/web/dashboard.js)
//   GET /dashboard/chart.min.js  Chart.js from the configured file (Debian
//                                libjs-chart.js); nothing is loaded from a CDN
// Anything else is 404; methods other than GET/HEAD are 405; HEAD gets GET's headers
// (Content-Length of the body it would have) and no body. A request header over 16 KiB
// gets 431, a body over 64 KiB 413, a request that is not HTTP/1.x 400, then the
// connection closes. Keep-alive
// is supported; each read and write has a deadline (Beast's tcp_stream timeouts).
//
// Thread-safety: runs on the server's io_context; Stop() may be called from any thread.
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <memory>
#include <string>

#include "kvstash/result.h"

namespace kvstash::server {

// Open HTTP connections at most: the HTTP port serves operators and scrapers, so a
// flood of connections there must not take the descriptors the protocol port needs.
// A connection past it replaces the one that has waited longest for a request (that
// one is closed), so idle or reconnecting connections cannot keep a health probe out;
// when every connection is handling a request, the new one is closed without a reply.
inline constexpr int kMaxHttpConnections = 256;

struct HttpSources {
  std::function<std::string()> metrics_text;  // /metrics body
  std::function<std::string()> stats_json;    // /v1/stats body
  std::function<std::string()> history_json;  // /v1/history body
  std::function<bool()> draining;             // /healthz answers 503 when true
  std::string chart_js_path;                  // file served as chart.min.js
  // Lines appended to /healthz (degraded parts; empty when all is well). May be empty.
  std::function<std::string()> health_detail;
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& ioc, HttpSources sources);
  // Binds and starts accepting. Errors: IOError when the address cannot be bound.
  Status Listen(const std::string& address, uint16_t port);
  uint16_t port() const { return port_; }
  // Closes the acceptor; open HTTP connections end after their current request.
  void Stop();
  // Closes the acceptor at once. REQUIRES: the io_context is not running (after the
  // server's threads stopped).
  void CloseNow();

 private:
  boost::asio::io_context& ioc_;
  std::shared_ptr<HttpSources> sources_;
  std::shared_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  uint16_t port_ = 0;
};

// The embedded dashboard files (generated from server/web/ at build time).
extern const char kDashboardHtml[];
extern const char kDashboardJs[];

}  // namespace kvstash::server
