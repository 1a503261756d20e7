// HttpGet: one plain HTTP/1.1 GET over a raw socket, for tests of the server's HTTP
// port (/metrics, /v1/stats, /healthz). Blocking; thread-safe (no shared state).
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <string>

namespace kvstash::server::testing {

// GET `path` from host:port; returns the status line and the body ({"", ""} when the
// connection fails). Sockets open in the calling thread's network namespace.
inline std::pair<std::string, std::string> HttpGet(int port, const std::string& path,
                                                   const std::string& host = "127.0.0.1") {
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket s(ioc);
  boost::system::error_code ec;
  s.connect({asio::ip::make_address(host), static_cast<uint16_t>(port)}, ec);
  if (ec) return {"", ""};
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  asio::write(s, asio::buffer(req), ec);
  std::string all;
  asio::read(s, asio::dynamic_buffer(all), ec);
  const size_t eol = all.find("\r\n"), body = all.find("\r\n\r\n");
  return {all.substr(0, eol), body == std::string::npos ? "" : all.substr(body + 4)};
}

}  // namespace kvstash::server::testing
