// Server addressing of kvstash::Client (client.h): rendezvous choice of a chain's
// server and "host:port" parsing.
#include <string>
#include <utility>

#include "common/checksum.h"
#include "kvstash/client.h"

namespace kvstash {

size_t RendezvousPick(std::span<const std::string> servers, const StoredKey& key) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < servers.size(); ++i) {
    std::string buf = servers[i];
    buf.append(reinterpret_cast<const char*>(key.data()), key.size());
    const uint64_t score = Xxh3_64(buf);
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

Result<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument("server address \"" + address + "\" is not host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return Status::InvalidArgument("server address \"" + address + "\": bad [IPv6] literal");
    }
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
  uint32_t value = 0;
  for (char ch : port) {
    if (ch < '0' || ch > '9' || port.size() > 5) {
      return Status::InvalidArgument("server address \"" + address + "\": port \"" + port +
                                     "\" is not a number in 1..65535");
    }
    value = value * 10 + static_cast<uint32_t>(ch - '0');
  }
  if (value == 0 || value > 65535) {
    return Status::InvalidArgument("server address \"" + address + "\": port " + port +
                                   " is outside 1..65535");
  }
  return std::make_pair(host, static_cast<uint16_t>(value));
}

}  // namespace kvstash
