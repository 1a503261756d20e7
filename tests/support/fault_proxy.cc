#include "tests/support/fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

#include "kvstash/payload_format.h"
#include "protocol/frame.h"
#include "protocol/frame_parser.h"
#include "protocol/messages.h"

namespace kvstash::testing {

using protocol::Frame;
using protocol::FrameParser;
using protocol::Opcode;

// One proxied connection: the client's socket, the target's, the GETs in flight.
struct FaultProxy::Conn {
  int client_fd = -1;
  int server_fd = -1;  // set by Serve once connected (under mu)
  std::thread thread;
  std::atomic<bool> done{false};
  bool closed = false;  // Shut() ran (under mu)
  std::mutex mu;
  // Request id -> the key the client asked for, for every GET forwarded and not yet
  // answered (the reply names no key).
  std::map<uint64_t, StoredKey> pending_gets;

  // Shuts both sockets down (wakes both pumps); the fds are closed after the join.
  void Shut() {
    std::lock_guard<std::mutex> l(mu);
    closed = true;
    if (client_fd >= 0) shutdown(client_fd, SHUT_RDWR);
    if (server_fd >= 0) shutdown(server_fd, SHUT_RDWR);
  }
  void CloseFds() {
    if (client_fd >= 0) close(client_fd);
    if (server_fd >= 0) close(server_fd);
    client_fd = server_fd = -1;
  }
};

namespace {

constexpr uint32_t kMaxBody = 0xFFFFFFFFu;  // the proxy imposes no frame limit of its own

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

bool SendAll(int fd, std::span<const uint8_t> data) {
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int ConnectTo(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc;
    do {
      rc = connect(fd, a->ai_addr, a->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) NoDelay(fd);
  return fd;
}

// Reads `fd` and hands every complete frame to `on_frame` (which appends what to send
// to `out`); sends `out` to `to`. Returns on EOF, a socket error or a bad frame.
template <typename OnFrame>
void Pump(int from, int to, FrameParser::Direction direction, OnFrame on_frame) {
  FrameParser parser(kMaxBody, direction);
  std::vector<uint8_t> buf(256 * 1024), out;
  for (;;) {
    const ssize_t n = recv(from, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::span<const uint8_t> in(buf.data(), static_cast<size_t>(n));
    while (!in.empty()) {
      size_t used = 0;
      const FrameParser::Outcome o = parser.Feed(in, &used);
      in = in.subspan(used);
      if (o == FrameParser::Outcome::kBad) return;  // cannot resynchronise: close
      if (o == FrameParser::Outcome::kComplete) {
        Frame f = parser.TakeFrame();
        out.clear();
        on_frame(f, &out);
        if (!SendAll(to, out)) return;
      }
    }
  }
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<StoredKey> ParseStoredKeyHex(std::string_view hex) {
  StoredKey k{};
  if (hex.size() != 2 * k.size()) {
    return Status::InvalidArgument("a key is 32 hex digits, not '" + std::string(hex) + "'");
  }
  for (size_t i = 0; i < k.size(); ++i) {
    const int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("not a hex key: '" + std::string(hex) + "'");
    k[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return k;
}

FaultProxy::FaultProxy() = default;

FaultProxy::~FaultProxy() { Stop(); }

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& target_address) {
  std::string host;
  std::string port;
  if (!target_address.empty() && target_address[0] == '[') {
    const size_t close_at = target_address.find(']');
    if (close_at == std::string::npos || close_at + 1 >= target_address.size() ||
        target_address[close_at + 1] != ':') {
      return Status::InvalidArgument("target '" + target_address + "' is not [host]:port");
    }
    host = target_address.substr(1, close_at - 1);
    port = target_address.substr(close_at + 2);
  } else {
    const size_t colon = target_address.rfind(':');
    if (colon == std::string::npos || target_address.find(':') != colon) {
      return Status::InvalidArgument("target '" + target_address + "' is not host:port");
    }
    host = target_address.substr(0, colon);
    port = target_address.substr(colon + 1);
  }
  char* end = nullptr;
  const unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p == 0 || p > 65535) {
    return Status::InvalidArgument("target '" + target_address + "': bad port");
  }
  return Start(host, static_cast<uint16_t>(p));
}

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& target_host,
                                                      uint16_t target_port) {
  if (target_host.empty() || target_port == 0) {
    return Status::InvalidArgument("FaultProxy: empty target host or port 0");
  }
  std::unique_ptr<FaultProxy> p(new FaultProxy());
  p->target_host_ = target_host;
  p->target_port_ = target_port;
  if (pipe2(p->wake_, O_CLOEXEC) != 0) return Status::IOError(Errno("pipe2"));
  p->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return Status::IOError(Errno("socket"));
  int one = 1;
  setsockopt(p->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return Status::IOError(Errno("bind 127.0.0.1:0"));
  }
  if (listen(p->listen_fd_, 128) != 0) return Status::IOError(Errno("listen"));
  socklen_t len = sizeof(a);
  if (getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Status::IOError(Errno("getsockname"));
  }
  p->port_ = ntohs(a.sin_port);
  p->accept_thread_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  return p;
}

void FaultProxy::Substitute(const StoredKey& from, const StoredKey& to) {
  std::lock_guard<std::mutex> l(mu_);
  substitute_[from] = to;
}

void FaultProxy::Flip(const StoredKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  flip_.insert(key);
}

void FaultProxy::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  substitute_.clear();
  flip_.clear();
}

Status FaultProxy::AddRule(std::string_view line) {
  std::istringstream in{std::string(line)};
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  if (w.empty()) return Status::InvalidArgument("empty rule");
  if (w[0] == "clear" && w.size() == 1) {
    Clear();
    return Status::Ok();
  }
  if (w[0] == "flip" && w.size() == 2) {
    KVSTASH_ASSIGN_OR_RETURN(StoredKey k, ParseStoredKeyHex(w[1]));
    Flip(k);
    return Status::Ok();
  }
  if (w[0] == "substitute" && w.size() == 3) {
    KVSTASH_ASSIGN_OR_RETURN(StoredKey from, ParseStoredKeyHex(w[1]));
    KVSTASH_ASSIGN_OR_RETURN(StoredKey to, ParseStoredKeyHex(w[2]));
    Substitute(from, to);
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown rule '" + std::string(line) +
                                 "' (substitute A D | flip A | clear)");
}

bool FaultProxy::SubstituteFor(const StoredKey& key, StoredKey* to) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = substitute_.find(key);
  if (it == substitute_.end()) return false;
  *to = it->second;
  return true;
}

bool FaultProxy::FlipFor(const StoredKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  return flip_.count(key) != 0;
}

void FaultProxy::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const int r = poll(fds, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (fds[1].revents & POLLIN) != 0 || stopping_.load()) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    NoDelay(fd);
    // Finished connections are joined here (outside mu_: their threads may still be
    // returning), so a long test does not accumulate threads.
    std::list<std::unique_ptr<Conn>> finished;
    auto conn = std::make_unique<Conn>();
    conn->client_fd = fd;
    Conn* c = conn.get();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_.load()) {
        close(fd);
        return;
      }
      for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done.load()) {
          finished.push_back(std::move(*it));
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
      conns_.push_back(std::move(conn));
      connections_.fetch_add(1);
      c->thread = std::thread([this, c] { Serve(c); });
    }
    for (auto& f : finished) {
      f->thread.join();
      f->CloseFds();
    }
  }
}

void FaultProxy::Serve(Conn* conn) {
  const int sfd = ConnectTo(target_host_, target_port_);
  bool go = sfd >= 0;
  {
    std::lock_guard<std::mutex> l(conn->mu);
    conn->server_fd = sfd;
    if (conn->closed) {
      go = false;  // Stop() ran while connecting
      if (sfd >= 0) shutdown(sfd, SHUT_RDWR);
    }
  }
  if (go) {
    std::thread replies([this, conn] {
      PumpReplies(conn);
      conn->Shut();
    });
    PumpRequests(conn);
    conn->Shut();
    replies.join();
  } else {
    conn->Shut();
  }
  conn->done.store(true);
}

void FaultProxy::PumpRequests(Conn* conn) {
  Pump(conn->client_fd, conn->server_fd, FrameParser::Direction::kRequests,
       [&](Frame& f, std::vector<uint8_t>* out) {
         if (f.header.opcode == static_cast<uint8_t>(Opcode::kGet)) {
           auto req = protocol::GetRequest::Decode(f.header.flags, f.body);
           if (req.ok()) {
             {
               // Recorded before the request leaves: its reply cannot overtake it.
               std::lock_guard<std::mutex> l(conn->mu);
               conn->pending_gets[f.header.request_id] = req->key;
             }
             StoredKey to{};
             if (SubstituteFor(req->key, &to)) {
               req->key = to;
               f.body.clear();
               req->Encode(&f.body);  // same flags: Flags() of the decoded request
               substituted_.fetch_add(1);
             }
           }
         }
         protocol::AppendFrame(f.header, f.body, out);  // header and body CRC recomputed
       });
}

void FaultProxy::PumpReplies(Conn* conn) {
  Pump(conn->server_fd, conn->client_fd, FrameParser::Direction::kReplies,
       [&](Frame& f, std::vector<uint8_t>* out) {
         if (f.header.opcode == (static_cast<uint8_t>(Opcode::kGet) | protocol::kReplyBit)) {
           std::optional<StoredKey> asked;
           {
             std::lock_guard<std::mutex> l(conn->mu);
             auto it = conn->pending_gets.find(f.header.request_id);
             if (it != conn->pending_gets.end()) {
               asked = it->second;
               conn->pending_gets.erase(it);
             }
           }
           if (asked && f.header.status == 0 && FlipFor(*asked)) {
             auto reply = protocol::GetReply::Decode(f.header.flags, f.body);
             if (reply.ok() && !reply->payload.empty()) {
               std::vector<uint8_t>& p = reply->payload;
               size_t at = p.size() - 1;
               auto h = ParsePayloadHeader(p);
               if (h.ok() && p.size() > h->header_bytes()) {
                 at = h->header_bytes() + (p.size() - h->header_bytes()) / 2;
               }
               p[at] ^= 0x01;
               f.body.clear();
               reply->Encode(&f.body);
               flipped_.fetch_add(1);
             }
           }
         }
         protocol::AppendFrame(f.header, f.body, out);
       });
}

void FaultProxy::Stop() {
  if (stopping_.exchange(true)) return;  // a second call: the first one did the work
  if (wake_[1] >= 0) {
    const char b = 1;
    (void)!write(wake_[1], &b, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::unique_ptr<Conn>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    all.swap(conns_);
  }
  for (auto& c : all) c->Shut();
  for (auto& c : all) {
    if (c->thread.joinable()) c->thread.join();
    c->CloseFds();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  for (int& fd : wake_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

}  // namespace kvstash::testing
