// The fault-injection proxy itself (tests/support/fault_proxy.h), at the frame level,
// against a fake target that answers GET with a valid payload bound to the key it was
// asked for: without a rule everything passes unchanged; `substitute A D` makes a GET
// of A come back with D's payload (and the target see D); `flip A` changes one byte of
// A's payload body while every frame CRC stays valid (only the payload's body checksum
// sees it); the executable answers its stdin rules.
#include "tests/support/fault_proxy.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstash/payload_format.h"
#include "protocol/frame.h"
#include "protocol/frame_parser.h"
#include "protocol/messages.h"
#include "tests/support/test_util.h"

extern char** environ;

namespace kvstash::testing {
namespace {

using protocol::Frame;
using protocol::FrameHeader;
using protocol::FrameParser;
using protocol::Opcode;

StoredKey Key(uint8_t b) {
  StoredKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(b + 3 * i);
  return k;
}

// A valid version-2 payload bound to `key` whose body is derived from it.
std::vector<uint8_t> PayloadFor(const StoredKey& key) {
  PayloadHeader h;
  h.chunk_key = key;
  h.codec = CodecId::kRaw;
  h.layout = KvLayout{1, 1, 8, DType::kBF16};
  h.tokens = 2;
  std::vector<uint8_t> body(64);
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<uint8_t>(key[i % key.size()] * 7 + i);
  return BuildPayload(h, body).value();
}

// Reads frames from one socket; bytes after a frame's end are kept for the next one.
class FrameReader {
 public:
  FrameReader(int fd, FrameParser::Direction direction) : fd_(fd), parser_(1u << 30, direction) {}
  // False on EOF, a socket error or a bad frame (then error() says why).
  bool Next(Frame* out) {
    for (;;) {
      while (!rest_.empty()) {
        size_t used = 0;
        const auto o = parser_.Feed(rest_, &used);
        rest_.erase(rest_.begin(), rest_.begin() + static_cast<long>(used));
        if (o == FrameParser::Outcome::kBad) return false;
        if (o == FrameParser::Outcome::kComplete) {
          *out = parser_.TakeFrame();
          return true;
        }
      }
      uint8_t b[4096];
      const ssize_t n = recv(fd_, b, sizeof(b), 0);
      if (n <= 0) return false;
      rest_.assign(b, b + n);
    }
  }
  Status error() const { return parser_.is_bad() ? parser_.error() : Status::Unavailable("connection closed"); }

 private:
  int fd_;
  FrameParser parser_;
  std::vector<uint8_t> rest_;
};

bool SendAll(int fd, const std::vector<uint8_t>& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

int Listen(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int ConnectLoopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// A frame-level stand-in for kvstash-server: GET answers PayloadFor(key) (with the
// memory fields when asked), PING echoes, anything else is NotSupported. Records the
// keys it was asked for. One connection at a time is enough here.
class FakeTarget {
 public:
  FakeTarget() {
    fd_ = Listen(&port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeTarget() {
    shutdown(fd_, SHUT_RDWR);
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int c : clients_) shutdown(c, SHUT_RDWR);
    }
    thread_.join();
    for (auto& t : conn_threads_) t.join();
    for (int c : clients_) close(c);
    close(fd_);
  }
  uint16_t port() const { return port_; }
  std::vector<StoredKey> asked() {
    std::lock_guard<std::mutex> l(mu_);
    return asked_;
  }

 private:
  void Run() {
    for (;;) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::lock_guard<std::mutex> l(mu_);
      clients_.push_back(c);
      conn_threads_.emplace_back([this, c] { Serve(c); });
    }
  }
  void Serve(int c) {
    FrameReader reader(c, FrameParser::Direction::kRequests);
    Frame f;
    while (reader.Next(&f)) {
      std::vector<uint8_t> out, body;
      FrameHeader h;
      h.opcode = static_cast<uint8_t>(f.header.opcode | protocol::kReplyBit);
      h.request_id = f.header.request_id;
      if (f.header.opcode == static_cast<uint8_t>(Opcode::kGet)) {
        auto req = protocol::GetRequest::Decode(f.header.flags, f.body);
        ASSERT_TRUE(req.ok()) << req.status().ToString();
        {
          std::lock_guard<std::mutex> l(mu_);
          asked_.push_back(req->key);
        }
        protocol::GetReply r;
        r.payload = PayloadFor(req->key);
        if (req->memory) r.memory = protocol::ReplyMemory{2, 64, 0};
        r.Encode(&body);
        h.flags = r.Flags();
        protocol::AppendFrame(h, body, &out);
      } else if (f.header.opcode == static_cast<uint8_t>(Opcode::kPing)) {
        protocol::AppendFrame(h, f.body, &out);
      } else {
        protocol::AppendErrorReply(f.header.opcode, f.header.request_id,
                                   Status::NotSupported("fake target"), &out);
      }
      if (!SendAll(c, out)) return;
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> clients_;
  std::vector<std::thread> conn_threads_;
  std::vector<StoredKey> asked_;
};

// A raw protocol client on one connection.
class RawClient {
 public:
  explicit RawClient(uint16_t port)
      : fd_(ConnectLoopback(port)), reader_(fd_, FrameParser::Direction::kReplies) {}
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  void SendGet(uint64_t id, const StoredKey& key, bool memory = false) {
    protocol::GetRequest req;
    req.key = key;
    req.memory = memory;
    std::vector<uint8_t> body, out;
    req.Encode(&body);
    FrameHeader h;
    h.opcode = static_cast<uint8_t>(Opcode::kGet);
    h.flags = req.Flags();
    h.request_id = id;
    protocol::AppendFrame(h, body, &out);
    ASSERT_TRUE(SendAll(fd_, out));
  }
  // The next reply frame; a frame whose header or body CRC is wrong fails here.
  Result<Frame> Receive() {
    Frame f;
    if (!reader_.Next(&f)) return reader_.error();
    return f;
  }
  Result<protocol::GetReply> Get(uint64_t id, const StoredKey& key, bool memory = false) {
    SendGet(id, key, memory);
    KVSTASH_ASSIGN_OR_RETURN(Frame f, Receive());
    if (f.header.request_id != id || f.header.status != 0) return Status::Internal("unexpected reply");
    return protocol::GetReply::Decode(f.header.flags, f.body);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
  FrameReader reader_;
};

TEST(FaultProxyTest, SubstituteServesTheOtherKeysValidPayloadForA) {
  FakeTarget target;
  ASSERT_OK_AND_ASSIGN(auto proxy, FaultProxy::Start("127.0.0.1", target.port()));
  RawClient c(proxy->port());
  ASSERT_TRUE(c.ok());
  const StoredKey a = Key(1), d = Key(100), b = Key(50);

  // No rule: A's own payload, byte for byte.
  ASSERT_OK_AND_ASSIGN(auto r0, c.Get(1, a));
  EXPECT_EQ(r0.payload, PayloadFor(a));
  EXPECT_EQ(proxy->substituted(), 0u);

  // substitute A D: the target is asked for D and the reply to "GET A" is D's payload,
  // a valid payload (header CRC, body checksum) bound to D.
  ASSERT_OK(proxy->AddRule("substitute " + ToHex(a) + " " + ToHex(d)));
  ASSERT_OK_AND_ASSIGN(auto r1, c.Get(2, a, /*memory=*/true));
  EXPECT_EQ(r1.payload, PayloadFor(d));
  ASSERT_TRUE(r1.memory.has_value());  // the request's flags were kept
  EXPECT_EQ(target.asked().back(), d);
  EXPECT_OK(ParsePayload(r1.payload));
  EXPECT_STATUS(CheckPayloadKey(r1.payload, a), kCorruption);  // what the key check sees
  EXPECT_EQ(proxy->substituted(), 1u);
  // Other keys are untouched.
  ASSERT_OK_AND_ASSIGN(auto r2, c.Get(3, b));
  EXPECT_EQ(r2.payload, PayloadFor(b));

  // Pipelined: several requests in one write, replies in order of the fake target.
  c.SendGet(10, a);
  c.SendGet(11, b);
  c.SendGet(12, d);
  std::map<uint64_t, std::vector<uint8_t>> got;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(Frame f, c.Receive());
    ASSERT_OK_AND_ASSIGN(auto r, protocol::GetReply::Decode(f.header.flags, f.body));
    got[f.header.request_id] = r.payload;
  }
  EXPECT_EQ(got[10], PayloadFor(d));
  EXPECT_EQ(got[11], PayloadFor(b));
  EXPECT_EQ(got[12], PayloadFor(d));
  EXPECT_EQ(proxy->substituted(), 2u);

  // clear: A again.
  ASSERT_OK(proxy->AddRule("clear"));
  ASSERT_OK_AND_ASSIGN(auto r3, c.Get(20, a));
  EXPECT_EQ(r3.payload, PayloadFor(a));
  EXPECT_EQ(proxy->substituted(), 2u);
}

TEST(FaultProxyTest, FlipChangesOneBodyByteBehindValidFrameCrcs) {
  FakeTarget target;
  ASSERT_OK_AND_ASSIGN(auto proxy, FaultProxy::Start("127.0.0.1:" + std::to_string(target.port())));
  RawClient c(proxy->port());
  ASSERT_TRUE(c.ok());
  const StoredKey a = Key(7), d = Key(9);
  const std::vector<uint8_t> want = PayloadFor(a);
  proxy->Flip(a);
  ASSERT_OK_AND_ASSIGN(auto r, c.Get(1, a, /*memory=*/true));  // frame CRCs valid: parsed
  EXPECT_EQ(proxy->flipped(), 1u);
  ASSERT_EQ(r.payload.size(), want.size());
  std::vector<size_t> diff;
  for (size_t i = 0; i < want.size(); ++i) {
    if (r.payload[i] != want[i]) diff.push_back(i);
  }
  ASSERT_EQ(diff.size(), 1u);
  EXPECT_GE(diff[0], size_t{kPayloadHeaderBytes});   // in the body, not the header
  EXPECT_OK(CheckPayloadKey(r.payload, a));          // still A's, header intact
  EXPECT_STATUS(ParsePayload(r.payload), kCorruption);  // the body checksum sees it
  ASSERT_TRUE(r.memory.has_value());
  EXPECT_EQ(r.memory->raw_positions, 2u);
  // Flip follows the key the client asked for, also when it is substituted.
  proxy->Substitute(a, d);
  ASSERT_OK_AND_ASSIGN(auto r2, c.Get(2, a));
  EXPECT_STATUS(CheckPayloadKey(r2.payload, a), kCorruption);
  EXPECT_STATUS(ParsePayload(r2.payload), kCorruption);
  // Other keys are untouched.
  ASSERT_OK_AND_ASSIGN(auto r3, c.Get(3, d));
  EXPECT_EQ(r3.payload, PayloadFor(d));
  EXPECT_EQ(proxy->flipped(), 2u);
}

TEST(FaultProxyTest, RulesAreParsedAndBadFramesCloseTheConnection) {
  FakeTarget target;
  ASSERT_OK_AND_ASSIGN(auto proxy, FaultProxy::Start("127.0.0.1", target.port()));
  EXPECT_STATUS(proxy->AddRule(""), kInvalidArgument);
  EXPECT_STATUS(proxy->AddRule("substitute 00"), kInvalidArgument);
  EXPECT_STATUS(proxy->AddRule("flip " + std::string(32, 'g')), kInvalidArgument);
  EXPECT_STATUS(proxy->AddRule("drop " + ToHex(Key(1))), kInvalidArgument);
  EXPECT_STATUS(proxy->AddRule("clear now"), kInvalidArgument);
  EXPECT_OK(proxy->AddRule("  flip  " + ToHex(Key(1)) + "  "));
  EXPECT_STATUS(FaultProxy::Start("127.0.0.1:0"), kInvalidArgument);
  EXPECT_STATUS(FaultProxy::Start("nohostport"), kInvalidArgument);
  // Garbage instead of a frame: the proxy cannot resynchronise and closes.
  RawClient c(proxy->port());
  ASSERT_TRUE(c.ok());
  std::vector<uint8_t> junk(64, 0xAB);
  ASSERT_TRUE(SendAll(c.fd(), junk));
  EXPECT_FALSE(c.Receive().ok());
  proxy->Stop();
  proxy->Stop();  // idempotent
}

// kvstash_fault_proxy: --port-file, rules on stdin answered on stdout, exit on EOF.
TEST(FaultProxyTest, ExecutableAnswersRulesAndExitsOnStdinEof) {
  FakeTarget target;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvstash-fault-proxy-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string port_file = (dir / "port").string();
  std::filesystem::remove(port_file);
  int in[2], out[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  std::vector<std::string> args = {KVSTASH_FAULT_PROXY_BIN, "--target",
                                   "127.0.0.1:" + std::to_string(target.port()), "--port-file",
                                   port_file};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  FILE* answers = fdopen(out[0], "r");
  auto ask = [&](const std::string& line) {
    const std::string l = line + "\n";
    EXPECT_EQ(write(in[1], l.data(), l.size()), static_cast<ssize_t>(l.size()));
    char buf[512] = {};
    if (fgets(buf, sizeof(buf), answers) == nullptr) return std::string("<eof>");
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  };

  uint16_t port = 0;
  for (int i = 0; i < 500 && port == 0; ++i) {
    std::ifstream f(port_file);
    int p = 0;
    if (f >> p) port = static_cast<uint16_t>(p);
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(port, 0) << "no port file";
  const StoredKey a = Key(3), d = Key(4);
  EXPECT_EQ(ask("substitute " + ToHex(a) + " " + ToHex(d)), "ok");
  EXPECT_EQ(ask("bogus rule").rfind("error: ", 0), 0u);
  {
    RawClient c(port);
    ASSERT_TRUE(c.ok());
    ASSERT_OK_AND_ASSIGN(auto r, c.Get(1, a));
    EXPECT_EQ(r.payload, PayloadFor(d));
  }
  EXPECT_EQ(ask("stats"), "ok substituted=1 flipped=0 connections=1");
  EXPECT_EQ(ask("clear"), "ok");
  close(in[1]);  // EOF: the process exits 0
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  fclose(answers);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::testing
