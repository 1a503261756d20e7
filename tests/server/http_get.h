// A minimal blocking HTTP/1.1 GET for tests of the server's HTTP port (/metrics,
// /v1/stats, /v1/history): one request over a raw loopback socket, Connection: close.
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio.hpp>
#include <string>

namespace kvstash::server::testing {

// GETs `path` from 127.0.0.1:`port`; returns {status line, body}. Throws
// boost::system::system_error when the connection is refused.
inline std::pair<std::string, std::string> HttpGet(int port, const std::string& path) {
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket s(ioc);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  asio::write(s, asio::buffer(req));
  std::string all;
  boost::system::error_code ec;
  asio::read(s, asio::dynamic_buffer(all), ec);
  const size_t eol = all.find("\r\n"), body = all.find("\r\n\r\n");
  return {all.substr(0, eol), body == std::string::npos ? "" : all.substr(body + 4)};
}

}  // namespace kvstash::server::testing
