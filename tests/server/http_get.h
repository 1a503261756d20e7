// HttpGet: one plain HTTP GET over a raw socket, for tests of HTTP ports (the server's
// /metrics, /v1/stats, /v1/history, /healthz; Prometheus' API). Blocking; thread-safe
// (no shared state). HTTP/1.0 keeps servers that would chunk a reply (Go's) from doing so.
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <string>

namespace kvstash::server::testing {

// GET `path` (already URL-encoded) from host:port as HTTP/1.1, or HTTP/1.0 when
// `http10`; returns the status line and the body ({"", ""} when the connection fails).
// Sockets open in the calling thread's network namespace.
inline std::pair<std::string, std::string> HttpGet(int port, const std::string& path,
                                                   const std::string& host = "127.0.0.1",
                                                   bool http10 = false) {
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket s(ioc);
  boost::system::error_code ec;
  s.connect({asio::ip::make_address(host), static_cast<uint16_t>(port)}, ec);
  if (ec) return {"", ""};
  const std::string req = "GET " + path + (http10 ? " HTTP/1.0" : " HTTP/1.1") +
                          "\r\nHost: x\r\nConnection: close\r\n\r\n";
  asio::write(s, asio::buffer(req), ec);
  std::string all;
  asio::read(s, asio::dynamic_buffer(all), ec);
  const size_t eol = all.find("\r\n"), body = all.find("\r\n\r\n");
  return {all.substr(0, eol), body == std::string::npos ? "" : all.substr(body + 4)};
}

// `text` percent-encoded for a URL query value (RFC 3986 unreserved characters kept).
inline std::string UrlEncode(const std::string& text) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace kvstash::server::testing
