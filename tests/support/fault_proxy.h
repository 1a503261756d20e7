// kvstash::testing::FaultProxy: a protocol-aware fault-injection proxy for tests.
//
// CONTRACT
// - Listens on 127.0.0.1 at a free port (port()) and forwards every connection it
//   accepts to one target (host:port, plain TCP; TLS is not proxied). Each direction's
//   byte stream is parsed into kvstash frames with the project's own protocol library
//   (protocol/: FrameParser, GetRequest, GetReply) and re-encoded with
//   AppendFrame, so every frame that leaves the proxy has valid header and body CRC32Cs:
//   only the checks of the payload itself (docs/format/payload.md) can see a fault.
// - Rules (hex stored keys: the 16-byte keys the client sends, before the server's
//   tenant scoping):
//     substitute A D  a GET request for key A is forwarded as a GET of key D (request
//                     body and CRCs re-encoded): the client receives D's valid payload
//                     as the answer for A. Flags (decoded, with_state, memory) are kept.
//     flip A          the Ok reply of a GET for key A (the key the client asked for,
//                     also when it was substituted) has one byte of its payload BODY
//                     (the middle byte after the payload header) flipped (^ 0x01), and
//                     the frame's body CRC recomputed. A payload without a body, or
//                     whose header does not parse, has its last byte flipped.
//     clear           removes every rule.
//   A rule applies to frames parsed after it was set (AddRule returns once it is in
//   force). Every other frame (HELLO, LOOKUP, PUT, ..., error replies, GETs of keys
//   without a rule) is forwarded unchanged, byte for byte.
// - A frame the parser refuses (bad magic, CRC, oversized) cannot be resynchronised:
//   the proxy closes both sides of that connection. A closed side closes the other.
// - Counters (substituted(), flipped()) say how many GETs each rule changed, so a
//   test can check the fault actually happened before it checks the outcome;
//   connections() counts the connections accepted.
// - Stop() (also the destructor) closes the listener and every connection and joins
//   every thread. Thread-safety: AddRule/Clear/counters may be called from any thread
//   while the proxy runs.
//
// The executable kvstash_fault_proxy (fault_proxy_main.cc) wraps this class for tests in
// other languages: --target HOST:PORT --port-file FILE, rules on stdin, one answer per
// line ("ok ..." or "error: ...") on stdout; also "stats" (answers
// "ok substituted=N flipped=M"). It exits on stdin EOF or SIGTERM/SIGINT.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash::testing {

class FaultProxy {
 public:
  // Starts listening on 127.0.0.1:0 and forwarding to target_host:target_port (a name
  // or an IPv4/IPv6 literal, resolved per connection). Errors: IOError (socket, bind,
  // listen), InvalidArgument (empty host, port 0).
  static Result<std::unique_ptr<FaultProxy>> Start(const std::string& target_host,
                                                   uint16_t target_port);
  // "host:port" (an IPv6 literal in brackets: "[::1]:7470").
  static Result<std::unique_ptr<FaultProxy>> Start(const std::string& target_address);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  uint16_t port() const { return port_; }
  // "127.0.0.1:<port>": what a client connects to.
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // GET of `from` is forwarded as GET of `to` (replaces an earlier rule for `from`).
  void Substitute(const StoredKey& from, const StoredKey& to);
  // The payload body of GET replies for `key` gets one byte flipped.
  void Flip(const StoredKey& key);
  void Clear();
  // Parses and applies one rule line ("substitute A D", "flip A", "clear"; keys as 32
  // hex digits). Errors: InvalidArgument (unknown rule, wrong word count, bad hex).
  Status AddRule(std::string_view line);

  uint64_t substituted() const { return substituted_.load(); }
  uint64_t flipped() const { return flipped_.load(); }
  uint64_t connections() const { return connections_.load(); }

  // Closes the listener and every connection; joins the threads. Idempotent.
  void Stop();

 private:
  struct Conn;
  FaultProxy();
  void AcceptLoop();
  void Serve(Conn* conn);
  // Pumps one direction of a connection until EOF, error or a bad frame.
  void PumpRequests(Conn* conn);
  void PumpReplies(Conn* conn);
  // The rule lookups (under mu_).
  bool SubstituteFor(const StoredKey& key, StoredKey* to);
  bool FlipFor(const StoredKey& key);

  std::string target_host_;
  uint16_t target_port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // self-pipe: Stop() wakes the accept loop
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};

  std::mutex mu_;  // rules and connections
  std::map<StoredKey, StoredKey> substitute_;
  std::set<StoredKey> flip_;
  std::list<std::unique_ptr<Conn>> conns_;

  std::atomic<uint64_t> substituted_{0}, flipped_{0}, connections_{0};
};

// Parses 32 hex digits into a stored key. Errors: InvalidArgument.
Result<StoredKey> ParseStoredKeyHex(std::string_view hex);

}  // namespace kvstash::testing
