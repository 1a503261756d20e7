// The server core and the client library over loopback, in one process: the server
// runs on its own threads with the in-memory ChunkStore, on ports chosen by the OS.
// Raw sockets play malformed, oversized and slow clients.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <array>
#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/worker_threads.h"
#include "kvstash/client.h"
#include "kvstash/payload_format.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/http_server.h"
#include "server/server.h"
#include "tests/server/memory_chunk_store.h"
#include "tests/server/test_payloads.h"
#include "tests/support/test_util.h"

namespace kvstash::server {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::Opcode;
using testing::Key;
using testing::Bound;
using testing::RawPayload;

ServerConfig TestConfig() {
  ServerConfig c;
  c.port = 0;
  c.http_port = 0;
  c.tenants = {{"a", "pa", ""}, {"b", "pb", ""}};
  c.limits.max_frame_bytes = 1u << 20;
  c.limits.max_in_flight = 8;
  c.limits.io_timeout_ms = 300;
  c.limits.hello_timeout_ms = 500;
  c.limits.idle_timeout_ms = 2000;
  c.drain_timeout_ms = 2000;
  return c;
}

class LoopbackTest : public ::testing::Test {
 protected:
  void StartServer(ServerConfig c = TestConfig()) {
    auto s = Server::Create(std::move(c), std::make_unique<testing::MemoryChunkStore>());
    ASSERT_OK(s.status());
    server_ = std::move(s).value();
    ASSERT_OK(server_->Start());
  }
  // Tenant a on 127.0.0.1:`port`, one attempt per call (for errors that must not retry).
  static ClientOptions OneAttempt(uint16_t port) {
    ClientOptions o;
    o.servers = {"127.0.0.1:" + std::to_string(port)};
    o.tenant = "a";
    o.credential = "pa";
    o.max_attempts = 1;
    return o;
  }
  std::unique_ptr<Client> MakeClient(const std::string& tenant, const std::string& cred,
                                     uint32_t conns = 2) {
    ClientOptions o;
    o.servers = {"127.0.0.1:" + std::to_string(server_->port())};
    o.tenant = tenant;
    o.credential = cred;
    o.connections_per_server = conns;
    o.default_deadline = std::chrono::milliseconds(3000);
    return Client::Create(o).value();
  }
  kvstash::PutChunk Chunk(uint32_t key, std::optional<uint32_t> parent, uint32_t tokens = 16) {
    kvstash::PutChunk p;
    p.route = Key(1);
    p.key = Key(key);
    if (parent) p.parent = Key(*parent);
    p.payload = Bound(RawPayload(tokens, key), Key(key));
    return p;
  }
  // A raw socket connected to the protocol port.
  tcp::socket Raw() {
    tcp::socket s(ioc_);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    return s;
  }
  static std::vector<uint8_t> HelloFrame(const std::string& tenant, const std::string& cred) {
    std::vector<uint8_t> body, out;
    protocol::HelloRequest{1, tenant, cred, "raw"}.Encode(&body);
    protocol::AppendFrame({.opcode = 1, .request_id = 1}, body, &out);
    return out;
  }
  // Reads one reply frame header + body; Status of the header field or an I/O error.
  static Result<protocol::Frame> ReadFrame(tcp::socket& s) {
    uint8_t h[32];
    boost::system::error_code ec;
    asio::read(s, asio::buffer(h), ec);
    if (ec) return Status::Unavailable(ec.message());
    auto hd = protocol::DecodeFrameHeader(std::span<const uint8_t, 32>(h, 32));
    if (!hd.ok()) return hd.status();
    protocol::Frame f{*hd, std::vector<uint8_t>(hd->body_bytes)};
    asio::read(s, asio::buffer(f.body), ec);
    if (ec) return Status::Unavailable(ec.message());
    return f;
  }
  // True when the server closed `s` (read returns EOF/reset within `wait`).
  static bool ClosedByServer(tcp::socket& s) {
    uint8_t b[64];
    boost::system::error_code ec;
    while (true) {
      s.read_some(asio::buffer(b), ec);
      if (ec) return ec == asio::error::eof || ec == asio::error::connection_reset;
    }
  }

  // One HTTP/1.1 request to the HTTP port; the status code and body (code 0 when the
  // connection failed or no status line came back).
  std::pair<int, std::string> Http(const std::string& target, const std::string& extra_header = "") {
    boost::system::error_code ec;
    tcp::socket s(ioc_);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->http_port()), ec);
    if (ec) return {0, ec.message()};
    const std::string req = "GET " + target + " HTTP/1.1\r\nHost: x\r\n" + extra_header +
                            "Connection: close\r\n\r\n";
    asio::write(s, asio::buffer(req), ec);
    std::string resp;
    char b[4096];
    while (true) {
      const size_t n = s.read_some(asio::buffer(b), ec);
      resp.append(b, n);
      if (ec) break;
    }
    if (resp.rfind("HTTP/1.1 ", 0) != 0 || resp.size() < 12) return {0, resp};
    const size_t body_at = resp.find("\r\n\r\n");
    return {std::stoi(resp.substr(9, 3)),
            body_at == std::string::npos ? "" : resp.substr(body_at + 4)};
  }
  nlohmann::json ServerStats() { return nlohmann::json::parse(Http("/v1/stats").second); }

  asio::io_context ioc_;
  std::unique_ptr<Server> server_;
};

TEST_F(LoopbackTest, EveryOpcodeThroughTheClient) {
  StartServer();
  auto c = MakeClient("a", "pa");
  ASSERT_OK(c->Ping(0));
  ASSERT_OK(c->Put(Chunk(1, std::nullopt)));
  ASSERT_OK(c->Put(Chunk(2, 1)));
  std::vector<ChunkRef> chain = {{Key(1), 16}, {Key(2), 16}, {Key(3), 16}};
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult l, c->Lookup(chain));
  EXPECT_EQ(l.matched_chunks, 2u);
  EXPECT_EQ(l.matched_tokens, 32u);
  ASSERT_OK_AND_ASSIGN(GetResult g, c->Get(Key(1), Key(2)));
  EXPECT_EQ(g.payload, Bound(RawPayload(16, 2), Key(2)));
  EXPECT_STATUS(c->Get(Key(1), Key(3)), kNotFound);
  ASSERT_OK(c->Pin(Key(1), Key(1), true));
  EXPECT_STATUS(c->Pin(Key(1), Key(7), true), kNotFound);
  ASSERT_OK_AND_ASSIGN(bool existed, c->Delete(Key(1), Key(2)));
  EXPECT_TRUE(existed);
  ASSERT_OK_AND_ASSIGN(existed, c->Delete(Key(1), Key(2)));
  EXPECT_FALSE(existed);
  ASSERT_OK_AND_ASSIGN(std::string stats, c->Stats(0));
  auto j = nlohmann::json::parse(stats);
  EXPECT_EQ(j["tenant"], "a");
  EXPECT_EQ(j["requests"]["PUT"]["count"], 2);
  EXPECT_EQ(j["lookup"]["tokens_hit"], 32);
  EXPECT_EQ(ServerStats()["pinned_entries"], 1);
  // A payload that fails validation comes back as the server's status.
  kvstash::PutChunk bad = Chunk(5, std::nullopt);
  bad.payload[150] ^= 1;
  EXPECT_STATUS(c->Put(bad), kCorruption);
}

TEST_F(LoopbackTest, ClientExposesRequestMemory) {
  StartServer();
  auto c = MakeClient("a", "pa");
  // Raw chunk of 16 positions (SmallLayout: 128 bytes each) + a 130-byte state record.
  RecurrentState st;
  st.boundary_tokens = 16;
  st.tensors.push_back({"layers.0.state", DType::kF32, {2, 2}, std::vector<uint8_t>(16, 7)});
  kvstash::PutChunk p = Chunk(1, std::nullopt);
  p.state_record = EncodeStateRecord(st, Digest256{}).value();
  ASSERT_OK_AND_ASSIGN(PutResult put, c->PutWithResult(p));
  EXPECT_EQ(put.stored_bytes, 152u + 2048);
  ASSERT_TRUE(put.memory.has_value());
  EXPECT_EQ(*put.memory, (RequestMemory{2200, 16, 2048, 130}));
  EXPECT_EQ(put.memory->total_bytes(), 2330u);
  EXPECT_EQ(put.memory->coded_bytes(), 152u);
  ASSERT_OK_AND_ASSIGN(GetResult g, c->Get(Key(1), Key(1), GetOptions{false, true}));
  ASSERT_TRUE(g.memory.has_value());
  EXPECT_EQ(*g.memory, (RequestMemory{2200, 16, 2048, 130}));
  // A client that does not ask gets the version-1 replies.
  ClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(server_->port())};
  o.tenant = "a";
  o.credential = "pa";
  o.request_memory = false;
  auto old = Client::Create(o).value();
  ASSERT_OK_AND_ASSIGN(put, old->PutWithResult(Chunk(2, 1)));
  EXPECT_EQ(put.stored_bytes, 2200u);
  EXPECT_FALSE(put.memory.has_value());
  ASSERT_OK_AND_ASSIGN(g, old->Get(Key(1), Key(2)));
  EXPECT_FALSE(g.memory.has_value());
  auto j = ServerStats();
  EXPECT_EQ(j["memory"]["PUT"]["state_bytes"], 130);
  EXPECT_EQ(j["memory"]["GET"]["requests"], 2);
}

TEST_F(LoopbackTest, PipelinedAsyncCallsAllComplete) {
  StartServer();
  auto c = MakeClient("a", "pa", 1);  // one connection: everything pipelined on it
  ASSERT_OK(c->Put(Chunk(1, std::nullopt)));
  std::vector<std::future<Status>> puts;
  for (uint32_t i = 2; i < 200; ++i) puts.push_back(c->PutAsync(Chunk(i, 1, 1 + i % 7)));
  for (auto& f : puts) ASSERT_OK(f.get());
  std::vector<std::future<Result<GetResult>>> gets;
  for (uint32_t i = 2; i < 200; ++i) gets.push_back(c->GetAsync(Key(1), Key(i)));
  for (uint32_t i = 2; i < 200; ++i) {
    auto r = gets[i - 2].get();
    ASSERT_OK(r.status());
    EXPECT_EQ(r->payload, Bound(RawPayload(1 + i % 7, i), Key(i))) << i;
  }
  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i) {
    c->LookupAsync({{Key(1), 16}, {Key(2), 16}}, false, [&](Result<kvstash::LookupResult> r) {
      EXPECT_TRUE(r.ok() && r->matched_chunks == 2);
      done++;
    });
  }
  for (int i = 0; i < 200 && done < 50; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(done.load(), 50);
}

// The callback forms of Delete, Pin and Stats (what the Python asyncio API calls).
TEST_F(LoopbackTest, CallbackFormsOfDeletePinStats) {
  StartServer();
  auto c = MakeClient("a", "pa");
  ASSERT_OK(c->Put(Chunk(1, std::nullopt)));
  std::promise<Status> pinned, pin_missing;
  std::promise<Result<std::string>> stats, stats_bad;
  std::promise<Result<bool>> deleted, deleted_again;
  c->PinAsync(Key(1), Key(1), true, [&](Status s) { pinned.set_value(s); });
  ASSERT_OK(pinned.get_future().get());
  c->PinAsync(Key(1), Key(9), true, [&](Status s) { pin_missing.set_value(s); });
  EXPECT_STATUS(pin_missing.get_future().get(), kNotFound);
  c->StatsAsync(0, [&](Result<std::string> r) { stats.set_value(std::move(r)); });
  auto st = stats.get_future().get();
  ASSERT_OK(st.status());
  EXPECT_FALSE(st->empty());
  c->StatsAsync(5, [&](Result<std::string> r) { stats_bad.set_value(std::move(r)); });
  EXPECT_STATUS(stats_bad.get_future().get(), kInvalidArgument);
  c->DeleteAsync(Key(1), Key(1), [&](Result<bool> r) { deleted.set_value(std::move(r)); });
  auto d = deleted.get_future().get();
  ASSERT_OK(d.status());
  EXPECT_TRUE(*d);
  c->DeleteAsync(Key(1), Key(1), [&](Result<bool> r) { deleted_again.set_value(std::move(r)); });
  auto d2 = deleted_again.get_future().get();
  ASSERT_OK(d2.status());
  EXPECT_FALSE(*d2);
}

TEST_F(LoopbackTest, TwoTenantsAreIsolatedAndBadCredentialsRejected) {
  StartServer();
  auto a = MakeClient("a", "pa");
  auto b = MakeClient("b", "pb");
  ASSERT_OK(a->Put(Chunk(1, std::nullopt)));
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult la, a->Lookup(std::vector<ChunkRef>{{Key(1), 16}}));
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult lb, b->Lookup(std::vector<ChunkRef>{{Key(1), 16}}));
  EXPECT_EQ(la.matched_chunks, 1u);
  EXPECT_EQ(lb.matched_chunks, 0u);
  EXPECT_STATUS(b->Get(Key(1), Key(1)), kNotFound);
  auto wrong = MakeClient("a", "pb");
  EXPECT_STATUS(wrong->Lookup(std::vector<ChunkRef>{{Key(1), 16}}), kPermissionDenied);
}

TEST_F(LoopbackTest, MalformedFramesGetAnErrorAndOthersKeepBeingServed) {
  StartServer();
  auto good = MakeClient("a", "pa");
  ASSERT_OK(good->Put(Chunk(1, std::nullopt)));
  {  // garbage bytes: no header to answer, the connection closes
    tcp::socket s = Raw();
    std::vector<uint8_t> junk(64, 0x5A);
    asio::write(s, asio::buffer(junk));
    EXPECT_TRUE(ClosedByServer(s));
  }
  {  // valid header, corrupted body: error reply with the request id, then close
    tcp::socket s = Raw();
    auto hello = HelloFrame("a", "pa");
    asio::write(s, asio::buffer(hello));
    ASSERT_OK(ReadFrame(s).status());
    std::vector<uint8_t> f;
    protocol::AppendFrame({.opcode = 8, .request_id = 42}, std::vector<uint8_t>{1, 2, 3}, &f);
    f.back() ^= 0xFF;
    asio::write(s, asio::buffer(f));
    ASSERT_OK_AND_ASSIGN(protocol::Frame reply, ReadFrame(s));
    EXPECT_EQ(reply.header.request_id, 42u);
    EXPECT_EQ(reply.header.status, static_cast<uint8_t>(Status::Code::kCorruption));
    EXPECT_TRUE(ClosedByServer(s));
  }
  {  // oversized frame: ResourceExhausted before the body is read
    tcp::socket s = Raw();
    uint8_t h[32];
    protocol::EncodeFrameHeader({.opcode = 8, .request_id = 9, .body_bytes = (1u << 20) + 1}, h);
    asio::write(s, asio::buffer(h));
    ASSERT_OK_AND_ASSIGN(protocol::Frame reply, ReadFrame(s));
    EXPECT_EQ(reply.header.status, static_cast<uint8_t>(Status::Code::kResourceExhausted));
    EXPECT_TRUE(ClosedByServer(s));
  }
  {  // after HELLO, a PING header claiming more than PING's 65,536 bytes: answered
     // ResourceExhausted from the header alone (before, the server waited for the body)
    tcp::socket s = Raw();
    auto hello = HelloFrame("a", "pa");
    asio::write(s, asio::buffer(hello));
    ASSERT_OK(ReadFrame(s).status());
    uint8_t h[32];
    protocol::EncodeFrameHeader({.opcode = 8, .request_id = 10, .body_bytes = 65537, .body_crc32c = 1}, h);
    asio::write(s, asio::buffer(h));
    ASSERT_OK_AND_ASSIGN(protocol::Frame reply, ReadFrame(s));
    EXPECT_EQ(reply.header.request_id, 10u);
    EXPECT_EQ(reply.header.status, static_cast<uint8_t>(Status::Code::kResourceExhausted));
    EXPECT_TRUE(ClosedByServer(s));
  }
  {  // before HELLO only small frames: no 1 MiB buffer for an unauthenticated client
    tcp::socket s = Raw();
    uint8_t h[32];
    protocol::EncodeFrameHeader(
        {.opcode = 1, .request_id = 11, .body_bytes = protocol::kMaxUnauthenticatedBodyBytes + 1}, h);
    asio::write(s, asio::buffer(h));
    ASSERT_OK_AND_ASSIGN(protocol::Frame reply, ReadFrame(s));
    EXPECT_EQ(reply.header.request_id, 11u);
    EXPECT_EQ(reply.header.status, static_cast<uint8_t>(Status::Code::kResourceExhausted));
    EXPECT_TRUE(ClosedByServer(s));
  }
  {  // the same size after HELLO is within the server's limit: accepted (a PUT: PING's
     // own bound is 65,536 bytes); the body is not a PUT, so the reply is an error, but
     // not ResourceExhausted
    tcp::socket s = Raw();
    auto hello = HelloFrame("a", "pa");
    asio::write(s, asio::buffer(hello));
    ASSERT_OK(ReadFrame(s).status());
    std::vector<uint8_t> f;
    protocol::AppendFrame({.opcode = 3, .request_id = 12},
                          std::vector<uint8_t>(protocol::kMaxUnauthenticatedBodyBytes + 1, 7), &f);
    asio::write(s, asio::buffer(f));
    ASSERT_OK_AND_ASSIGN(protocol::Frame reply, ReadFrame(s));
    EXPECT_EQ(reply.header.request_id, 12u);
    EXPECT_NE(reply.header.status, static_cast<uint8_t>(Status::Code::kResourceExhausted));
  }
  {  // a request before HELLO
    tcp::socket s = Raw();
    std::vector<uint8_t> f, body;
    protocol::GetRequest{Key(1)}.Encode(&body);
    protocol::AppendFrame({.opcode = 4, .request_id = 5}, body, &f);
    asio::write(s, asio::buffer(f));
    ASSERT_OK_AND_ASSIGN(protocol::Frame reply, ReadFrame(s));
    EXPECT_EQ(reply.header.status, static_cast<uint8_t>(Status::Code::kPermissionDenied));
    EXPECT_TRUE(ClosedByServer(s));
  }
  ASSERT_OK_AND_ASSIGN(GetResult g, good->Get(Key(1), Key(1)));
  EXPECT_EQ(g.payload, Bound(RawPayload(16, 1), Key(1)));
  EXPECT_GE(ServerStats()["bad_frames"].get<int>(), 3);
}

TEST_F(LoopbackTest, SlowClientsAreCutOffByDeadlines) {
  StartServer();
  const auto t0 = std::chrono::steady_clock::now();
  tcp::socket slow_hello = Raw();  // never says HELLO: closed after hello_timeout_ms
  tcp::socket slowloris = Raw();
  auto hello = HelloFrame("a", "pa");
  asio::write(slowloris, asio::buffer(hello));
  ASSERT_OK(ReadFrame(slowloris).status());
  uint8_t h[32];
  protocol::EncodeFrameHeader({.opcode = 8, .request_id = 1, .body_bytes = 100}, h);
  asio::write(slowloris, asio::buffer(h, 10));  // a third of a header, then silence
  EXPECT_TRUE(ClosedByServer(slowloris));
  EXPECT_TRUE(ClosedByServer(slow_hello));
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  auto c = MakeClient("a", "pa");
  ASSERT_OK(c->Ping(0));
  EXPECT_GE(ServerStats()["timeouts"].get<int>(), 2);
}

// Raises RLIMIT_NOFILE to 4096 where allowed; the soft limit then in force.
rlim_t RaiseFileLimit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 2200) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 4096);
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

// This process's resident set (VmRSS), bytes.
size_t ResidentBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "... kB"
  }
  return 0;
}

// A connection that has not said HELLO costs a 4 KiB read buffer, not the 256 KiB one
// of an authenticated connection: 1,000 silent connections add well under 64 MiB
// (before: 1,000 x 256 KiB, zero-filled, ~250 MiB).
TEST_F(LoopbackTest, SilentConnectionsCostLittleMemory) {
  if (const rlim_t n = RaiseFileLimit(); n < 2200) GTEST_SKIP() << "RLIMIT_NOFILE " << n << " < 2200";
  StartServer();
  Http("/v1/stats");  // the HTTP path warmed up before the baseline
  const size_t before = ResidentBytes();
  constexpr int kConns = 1000;
  std::vector<tcp::socket> socks;
  for (int i = 0; i < kConns; ++i) socks.push_back(Raw());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ServerStats()["connections"]["open"].get<int>() < kConns && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ServerStats()["connections"]["open"].get<int>(), kConns);
  const size_t after = ResidentBytes();
  EXPECT_LT(after - std::min(after, before), size_t{64} << 20) << before << " -> " << after;
}

TEST_F(LoopbackTest, AThousandConcurrentConnections) {
  if (const rlim_t n = RaiseFileLimit(); n < 2200) GTEST_SKIP() << "RLIMIT_NOFILE " << n << " < 2200";
  StartServer();
  constexpr int kConns = 1000;
  std::vector<tcp::socket> socks;
  auto hello = HelloFrame("a", "pa");
  for (int i = 0; i < kConns; ++i) {
    socks.push_back(Raw());
    asio::write(socks.back(), asio::buffer(hello));
  }
  for (int i = 0; i < kConns; ++i) {
    ASSERT_OK_AND_ASSIGN(protocol::Frame r, ReadFrame(socks[i]));
    ASSERT_EQ(r.header.status, 0) << i;
  }
  // Every connection pings at once; every one answers.
  std::vector<uint8_t> ping;
  protocol::AppendFrame({.opcode = 8, .request_id = 77}, std::vector<uint8_t>{7}, &ping);
  for (auto& s : socks) asio::write(s, asio::buffer(ping));
  for (int i = 0; i < kConns; ++i) {
    ASSERT_OK_AND_ASSIGN(protocol::Frame r, ReadFrame(socks[i]));
    EXPECT_EQ(r.header.request_id, 77u);
    EXPECT_EQ(r.body, std::vector<uint8_t>{7});
  }
  EXPECT_EQ(ServerStats()["connections"]["open"].get<int>(), kConns);
}

TEST_F(LoopbackTest, ConnectionLimitRejectsTheExtraConnection) {
  ServerConfig cfg = TestConfig();
  cfg.limits.max_connections = 2;
  StartServer(cfg);
  tcp::socket a = Raw(), b = Raw();
  auto hello = HelloFrame("a", "pa");
  asio::write(a, asio::buffer(hello));
  asio::write(b, asio::buffer(hello));
  ASSERT_OK(ReadFrame(a).status());
  ASSERT_OK(ReadFrame(b).status());
  tcp::socket c = Raw();
  ASSERT_OK_AND_ASSIGN(protocol::Frame r, ReadFrame(c));
  EXPECT_EQ(r.header.status, static_cast<uint8_t>(Status::Code::kResourceExhausted));
  EXPECT_TRUE(ClosedByServer(c));
}

// The OS refusing one of the server's threads at start (EAGAIN; injected) fails Start
// with ResourceExhausted, joins the threads that started, writes no ready file, and the
// Server is destroyed without hanging; the process is not aborted (before, std::thread's
// exception escaped: exit 134) and a later server starts normally.
TEST_F(LoopbackTest, RefusedThreadsFailTheStartCleanly) {
  const auto ready = std::filesystem::temp_directory_path() /
                     ("kvstash-refused-" + std::to_string(::getpid()) + ".json");
  // 0: the first worker thread refused; 3: both workers and one I/O thread started.
  for (int allow : {0, 3}) {
    SCOPED_TRACE(allow);
    ServerConfig c = TestConfig();
    c.worker_threads = 2;
    c.io_threads = 2;
    c.ready_file = ready.string();
    auto s = Server::Create(std::move(c), std::make_unique<testing::MemoryChunkStore>());
    ASSERT_OK(s.status());
    RefuseThreadSpawnsForTesting(allow, 1);
    const Status st = (*s)->Start();
    RefuseThreadSpawnsForTesting(0, 0);
    EXPECT_STATUS(st, kResourceExhausted);
    EXPECT_NE(st.ToString().find(allow == 0 ? "0 of 2 worker and 0 of 2 I/O threads"
                                            : "2 of 2 worker and 1 of 2 I/O threads"),
              std::string::npos)
        << st.ToString();
    EXPECT_FALSE(std::filesystem::exists(ready));
    s->reset();  // ~Server: Shutdown + Wait, nothing left to hang on
  }
  StartServer();
  auto c = MakeClient("a", "pa");
  EXPECT_OK(c->Ping(0));
}

TEST_F(LoopbackTest, DrainFinishesRequestsInFlight) {
  StartServer();
  auto c = MakeClient("a", "pa", 1);
  ASSERT_OK(c->Put(Chunk(1, std::nullopt)));
  std::vector<std::future<Result<GetResult>>> gets;
  for (int i = 0; i < 20; ++i) gets.push_back(c->GetAsync(Key(1), Key(1)));
  // Shut down while the GETs are arriving (once the first was answered, so that the
  // test does not depend on thread timing).
  for (int i = 0; i < 500 && ServerStats()["requests"]["GET"]["count"] == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->Shutdown();
  server_->Wait();
  int ok = 0;
  for (auto& g : gets) {
    auto r = g.get();
    if (r.ok()) ++ok;
    else EXPECT_TRUE(r.status().IsRetryable()) << r.status().ToString();
  }
  EXPECT_GT(ok, 0);
  // After the drain nothing listens.
  boost::system::error_code ec;
  tcp::socket s(ioc_);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()), ec);
  EXPECT_TRUE(ec);
}

TEST_F(LoopbackTest, ClientRetriesUntilAServerAppearsAndHonoursDeadlines) {
  // Nothing listens on a port we reserve and release: Unavailable after retries.
  uint16_t port;
  {
    tcp::acceptor acc(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = acc.local_endpoint().port();
  }
  ClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(port)};
  o.tenant = "a";
  o.credential = "pa";
  o.max_attempts = 3;
  o.initial_backoff = std::chrono::milliseconds(5);
  auto c = Client::Create(o).value();
  EXPECT_STATUS(c->Ping(0), kUnavailable);
  CallOptions quick;
  quick.deadline = std::chrono::milliseconds(1);
  o.max_attempts = 1000;
  auto patient = Client::Create(o).value();
  EXPECT_STATUS(patient->Ping(0, quick), kDeadlineExceeded);
}

TEST_F(LoopbackTest, ADeadlineSpentConnectingSaysSo) {
  // A listener that accepts and never answers HELLO (a hung server, another protocol).
  tcp::acceptor silent(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  ClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(silent.local_endpoint().port())};
  o.tenant = "a";
  o.credential = "pa";
  o.connect_timeout = std::chrono::milliseconds(10000);
  o.default_deadline = std::chrono::milliseconds(200);
  auto c = Client::Create(o).value();
  const Status s = c->Ping(0);
  EXPECT_STATUS(s, kDeadlineExceeded);
  EXPECT_NE(s.message().find("PING: deadline passed after 1 attempt(s) while connecting to " +
                             o.servers[0] + " (no HELLO reply yet"),
            std::string::npos)
      << s.message();
}

TEST_F(LoopbackTest, AClientOnTheHttpPortIsToldSo) {
  StartServer();
  auto c = Client::Create(OneAttempt(server_->http_port())).value();
  const Result<uint32_t> max = c->MaxFrameBytes(0);
  EXPECT_STATUS(max, kCorruption);
  EXPECT_NE(max.status().message().find("reaching the server for its max_frame_bytes: the port "
                                        "answered in HTTP: it is a kvstash HTTP port"),
            std::string::npos)
      << max.status().message();
}

TEST_F(LoopbackTest, ADeadServersChainsFailOverAsMissesWithinTheDeadline) {
  // Two servers, the first of which is dead (nothing listens on its port): the chains it
  // owns are misses on the second, not errors, and then live there.
  StartServer();
  uint16_t dead_port;
  {
    tcp::acceptor acc(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    dead_port = acc.local_endpoint().port();
  }
  ClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(dead_port),
               "127.0.0.1:" + std::to_string(server_->port())};
  o.tenant = "a";
  o.credential = "pa";
  auto c = Client::Create(o).value();
  uint32_t root = 1;
  while (c->ServerFor(Key(root)) != 0) ++root;  // a chain the dead server owns
  EXPECT_EQ(RendezvousOrder(o.servers, Key(root)), (std::vector<size_t>{0, 1}));
  CallOptions call;
  call.deadline = std::chrono::milliseconds(1000);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<ChunkRef> chain = {{Key(root), 16}};
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult miss, c->Lookup(chain, false, call));
  EXPECT_EQ(miss.matched_chunks, 0u);
  EXPECT_STATUS(c->Get(Key(root), Key(root), {}, call), kNotFound);
  kvstash::PutChunk p = Chunk(root, std::nullopt);
  p.route = Key(root);
  ASSERT_OK(c->Put(p, call));
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult hit, c->Lookup(chain, false, call));
  EXPECT_EQ(hit.matched_chunks, 1u);
  ASSERT_OK_AND_ASSIGN(GetResult g, c->Get(Key(root), Key(root), {}, call));
  EXPECT_EQ(g.payload, Bound(RawPayload(16, root), Key(root)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
  EXPECT_EQ(c->ServerFor(Key(root)), 0u);  // still its owner, once it is back
  // Without failover the dead owner's chain is an error.
  o.down_server_skip = std::chrono::milliseconds(0);
  auto strict = Client::Create(o).value();
  EXPECT_STATUS(strict->Lookup(chain, false, call), kUnavailable);
}

// A TLS certificate or key that cannot be used is refused at start-up, naming the file:
// a missing one as "no such file", an unreadable PEM as such (asio says only "asio.ssl
// error").
TEST_F(LoopbackTest, AnUnusableTlsFileIsNamed) {
  const std::string dir = ::testing::TempDir() + "kvstash-tls-bad-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/garbage.pem") << "not a certificate\n";
  for (const auto& [cert, want] :
       {std::pair<std::string, std::string>{dir + "/missing.pem", dir + "/missing.pem: no such file"},
        {dir + "/garbage.pem", dir + "/garbage.pem: not a usable PEM certificate"}}) {
    ServerConfig cfg = TestConfig();
    cfg.tls_cert_file = cert;
    cfg.tls_key_file = cert;
    auto s = Server::Create(std::move(cfg), std::make_unique<testing::MemoryChunkStore>());
    Status st = s.ok() ? (*s)->Start() : s.status();
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("TLS certificate " + want), std::string::npos) << st.ToString();
  }
  std::filesystem::remove_all(dir);
}

TEST_F(LoopbackTest, TlsOnTheProtocolPort) {
  // A throw-away self-signed certificate (openssl CLI, Debian package openssl).
  const std::string dir = ::testing::TempDir() + "kvstash-tls-" + std::to_string(getpid());
  const std::string cmd = "mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " +
                          dir + "/key.pem -out " + dir + "/cert.pem -days 1 -subj /CN=localhost " +
                          ">/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl CLI not available";
  ServerConfig cfg = TestConfig();
  cfg.tls_cert_file = dir + "/cert.pem";
  cfg.tls_key_file = dir + "/key.pem";
  StartServer(cfg);
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_verify_mode(asio::ssl::verify_none);
  asio::ssl::stream<tcp::socket> s(ioc_, ctx);
  s.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
  s.handshake(asio::ssl::stream_base::client);
  auto hello = HelloFrame("a", "pa");
  asio::write(s, asio::buffer(hello));
  std::vector<uint8_t> ping;
  protocol::AppendFrame({.opcode = 8, .request_id = 2}, std::vector<uint8_t>{4, 2}, &ping);
  asio::write(s, asio::buffer(ping));
  for (uint64_t want : {1u, 2u}) {
    uint8_t h[32];
    asio::read(s, asio::buffer(h));
    auto hd = protocol::DecodeFrameHeader(std::span<const uint8_t, 32>(h, 32)).value();
    EXPECT_EQ(hd.request_id, want);
    EXPECT_EQ(hd.status, 0);
    std::vector<uint8_t> body(hd.body_bytes);
    asio::read(s, asio::buffer(body));
    if (want == 2) EXPECT_EQ(body, (std::vector<uint8_t>{4, 2}));
  }
  // A plain-TCP client on the TLS port gets nowhere (closed by the handshake deadline
  // or failure), and the server goes on serving.
  tcp::socket plain = Raw();
  asio::write(plain, asio::buffer(hello));
  EXPECT_TRUE(ClosedByServer(plain));
  std::system(("rm -rf " + dir).c_str());
}

TEST_F(LoopbackTest, ClientRefusesARequestLargerThanTheServersFrameLimit) {
  StartServer();  // max_frame_bytes 1 MiB, announced in the HELLO reply
  kvstash::PutChunk big = Chunk(1, std::nullopt);
  big.payload = RawPayload(80, 1, KvLayout{8, 8, 64, DType::kBF16});  // 1.3 MB
  ASSERT_GT(big.payload.size(), 1u << 20);
  {  // the first call of a fresh client: the limit is learnt from the HELLO reply
    auto c = MakeClient("a", "pa", 1);
    const Status s = c->Put(big);
    EXPECT_STATUS(s, kInvalidArgument);
    EXPECT_NE(s.message().find("max_frame_bytes 1048576"), std::string::npos) << s.message();
  }
  auto c = MakeClient("a", "pa", 1);
  ASSERT_OK(c->Ping(0));
  EXPECT_STATUS(c->Put(big), kInvalidArgument);
  ASSERT_OK(c->Put(Chunk(2, std::nullopt)));  // the connection is fine
  // Never sent: the server saw no oversized frame and no PUT but the small one.
  auto j = ServerStats();
  EXPECT_EQ(j["bad_frames"], 0);
  EXPECT_EQ(j["requests"]["PUT"]["count"], 1);
}

TEST_F(LoopbackTest, AnotherProtocolVersionIsAnsweredNotSupported) {
  StartServer();
  tcp::socket s = Raw();
  uint8_t h[32];
  protocol::EncodeFrameHeader({.version = 2, .opcode = 8, .request_id = 31}, h);
  asio::write(s, asio::buffer(h));
  ASSERT_OK_AND_ASSIGN(protocol::Frame reply, ReadFrame(s));
  EXPECT_EQ(reply.header.version, protocol::kProtocolVersion);
  EXPECT_EQ(reply.header.opcode, 8 | protocol::kReplyBit);
  EXPECT_EQ(reply.header.request_id, 31u);
  EXPECT_EQ(reply.header.status, static_cast<uint8_t>(Status::Code::kNotSupported));
  EXPECT_NE(std::string(reply.body.begin(), reply.body.end()).find("version 2"), std::string::npos);
  EXPECT_TRUE(ClosedByServer(s));
}

TEST_F(LoopbackTest, HealthzIs503FromShutdownUntilExitWhileTheGraceServes) {
  const std::string ready = ::testing::TempDir() + "kvstash-ready-" + std::to_string(getpid());
  ServerConfig cfg = TestConfig();
  cfg.drain_grace_ms = 600;
  cfg.ready_file = ready;
  StartServer(cfg);
  EXPECT_TRUE(std::filesystem::exists(ready));
  EXPECT_EQ(Http("/healthz"), (std::pair<int, std::string>{200, "ok\n"}));
  auto c = MakeClient("a", "pa", 1);
  ASSERT_OK(c->Ping(0));
  const auto t0 = std::chrono::steady_clock::now();
  server_->Shutdown();
  EXPECT_EQ(Http("/healthz"), (std::pair<int, std::string>{503, "draining\n"}));
  // During the grace period old and new connections are served.
  ASSERT_OK(c->Put(Chunk(1, std::nullopt)));
  auto late = MakeClient("a", "pa", 1);
  ASSERT_OK(late->Ping(0));
  EXPECT_EQ(Http("/healthz").first, 503);
  server_->Wait();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(600));
  EXPECT_FALSE(std::filesystem::exists(ready)) << "ready file left behind";
  EXPECT_EQ(Http("/healthz").first, 0);  // nothing listens after the exit
}

TEST_F(LoopbackTest, ATricklingSenderIsCutOffByTheWholeFrameDeadline) {
  StartServer();  // io_timeout_ms 300
  tcp::socket s = Raw();
  auto hello = HelloFrame("a", "pa");
  asio::write(s, asio::buffer(hello));
  ASSERT_OK(ReadFrame(s).status());
  // A 96-byte PING frame, one byte every 50 ms: each read is well inside
  // io_timeout_ms, the whole frame would take 4.8 s.
  std::vector<uint8_t> frame;
  protocol::AppendFrame({.opcode = 8, .request_id = 3}, std::vector<uint8_t>(64, 7), &frame);
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (uint8_t b : frame) {
      boost::system::error_code ec;
      asio::write(s, asio::buffer(&b, 1), ec);
      if (ec || stop) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  EXPECT_TRUE(ClosedByServer(s));
  const auto waited = std::chrono::steady_clock::now() - t0;
  stop = true;
  trickle.join();
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
}

// Idle and reconnecting connections cannot keep /healthz out: past kMaxHttpConnections
// a new connection replaces the one that has waited longest for a request. Before, 256
// idle keep-alive connections plus a flood of new ones took every slot (a fresh-user
// helper's flood had 145 of 148 probes reset over 15 s).
TEST_F(LoopbackTest, HttpConnectionFloodsDoNotKeepAProbeOut) {
  StartServer();
  const tcp::endpoint http(asio::ip::make_address("127.0.0.1"), server_->http_port());
  std::vector<tcp::socket> idle;  // the longest waiting: the first the server closes
  for (int i = 0; i < kMaxHttpConnections; ++i) {
    idle.emplace_back(ioc_);
    idle.back().connect(http);
  }
  // New idle connections as fast as one thread can open them, 300 held at a time.
  std::atomic<bool> stop{false};
  std::atomic<int> flooded{0};
  std::thread flood([&] {
    asio::io_context fioc;
    std::deque<tcp::socket> open;
    while (!stop) {
      open.emplace_back(fioc);
      boost::system::error_code ec;
      open.back().connect(http, ec);
      ++flooded;
      if (open.size() > 300) open.pop_front();
    }
  });
  int probes = 0, answered = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    ++probes;
    if (Http("/healthz") == std::pair<int, std::string>{200, "ok\n"}) ++answered;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  flood.join();
  EXPECT_EQ(answered, probes);
  EXPECT_GT(flooded.load(), 2 * kMaxHttpConnections);  // the flood did turn the table over
  EXPECT_TRUE(ClosedByServer(idle.front()));
  auto client = MakeClient("a", "pa");
  ASSERT_OK(client->Put(Chunk(1, std::nullopt)));  // the protocol port is unaffected
}

TEST_F(LoopbackTest, HttpRequestWithAHugeHeaderGets431) {
  StartServer();
  auto [code, body] = Http("/healthz", "X-Big: " + std::string(100 * 1024, 'a') + "\r\n");
  EXPECT_EQ(code, 431) << body;
  EXPECT_EQ(Http("/healthz").first, 200);  // and the port keeps serving
}

TEST_F(LoopbackTest, ClientSpeaksTlsAndVerifiesTheServer) {
  const std::string dir = ::testing::TempDir() + "kvstash-ctls-" + std::to_string(getpid());
  const std::string cmd = "mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " +
                          dir + "/key.pem -out " + dir + "/cert.pem -days 1 -subj /CN=kvstash-test " +
                          "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl CLI not available";
  ServerConfig cfg = TestConfig();
  cfg.tls_cert_file = dir + "/cert.pem";
  cfg.tls_key_file = dir + "/key.pem";
  StartServer(cfg);
  auto tls_client = [&](const std::string& host, ClientTlsOptions tls) {
    ClientOptions o;
    o.servers = {host + ":" + std::to_string(server_->port())};
    o.tenant = "a";
    o.credential = "pa";
    o.max_attempts = 1;
    o.tls = tls;
    return Client::Create(o).value();
  };
  ClientTlsOptions verified{.enabled = true, .ca_file = dir + "/cert.pem"};
  {  // IP literal: checked against the IP SAN
    auto c = tls_client("127.0.0.1", verified);
    ASSERT_OK(c->Put(Chunk(1, std::nullopt)));
    ASSERT_OK_AND_ASSIGN(GetResult g, c->Get(Key(1), Key(1)));
    EXPECT_EQ(g.payload, Bound(RawPayload(16, 1), Key(1)));
  }
  {  // a host name via SNI
    ClientTlsOptions named = verified;
    named.server_name = "localhost";
    auto c = tls_client("127.0.0.1", named);
    ASSERT_OK(c->Ping(0));
  }
  {  // a name the certificate does not carry
    ClientTlsOptions wrong = verified;
    wrong.server_name = "other.example";
    auto c = tls_client("127.0.0.1", wrong);
    const Status s = c->Ping(0);
    EXPECT_STATUS(s, kUnavailable);
    EXPECT_NE(s.message().find("certificate"), std::string::npos) << s.message();
  }
  {  // not signed by a CA we trust (system defaults only)
    auto c = tls_client("127.0.0.1", ClientTlsOptions{.enabled = true});
    EXPECT_STATUS(c->Ping(0), kUnavailable);
  }
  {  // plain TCP against the TLS port: the error says the port may speak TLS
    auto c = tls_client("127.0.0.1", ClientTlsOptions{});
    const Status s = c->Ping(0);
    EXPECT_STATUS(s, kUnavailable);
    EXPECT_NE(s.message().find("connect with TLS"), std::string::npos) << s.message();
  }
  ClientOptions bad_ca;
  bad_ca.servers = {"127.0.0.1:1"};
  bad_ca.tenant = "a";
  bad_ca.tls = {.enabled = true, .ca_file = dir + "/missing.pem"};
  EXPECT_STATUS(Client::Create(bad_ca), kInvalidArgument);
  std::system(("rm -rf " + dir).c_str());
}

TEST_F(LoopbackTest, TlsClientOnAPlainPortIsToldSo) {
  StartServer();
  ClientOptions o = OneAttempt(server_->port());
  o.tls = {.enabled = true, .verify_peer = false};
  auto c = Client::Create(o).value();
  const Status s = c->Ping(0);
  EXPECT_STATUS(s, kUnavailable);
  EXPECT_NE(s.message().find("does the server's port speak TLS?"), std::string::npos) << s.message();
  ASSERT_OK(MakeClient("a", "pa", 1)->Ping(0));  // the server goes on serving plain clients
}

TEST(ClientOptionsTest, AnIpv6ServerIsNamedInBracketsInErrors) {
  ClientOptions o;
  o.servers = {"[::1]:1"};  // nothing listens on port 1 (or no IPv6: unreachable)
  o.tenant = "a";
  o.max_attempts = 1;
  auto c = Client::Create(o).value();
  const Status s = c->Ping(0);
  EXPECT_STATUS(s, kUnavailable);
  EXPECT_NE(s.message().find("connect to [::1]:1"), std::string::npos) << s.message();  // was ::1:1
}

TEST(ClientOptionsTest, ServerAddressesAreValidated) {
  for (const char* bad : {"127.0.0.1:99999", "h:0", "h:65536", "h:12a", "h:", ":80", "h",
                          "[::1:7470", "h:-1", "h:1234567", "::1", "::1:7470", "fe80::1:80"}) {
    ClientOptions o;
    o.servers = {bad};
    o.tenant = "a";
    EXPECT_STATUS(Client::Create(o), kInvalidArgument) << bad;
  }
  ASSERT_OK_AND_ASSIGN(auto hp, SplitHostPort("[::1]:7470"));
  EXPECT_EQ(hp.first, "::1");
  EXPECT_EQ(hp.second, 7470);
  ASSERT_OK_AND_ASSIGN(hp, SplitHostPort("kv.example:65535"));
  EXPECT_EQ(hp.first, "kv.example");
  EXPECT_EQ(hp.second, 65535);
}

TEST(RendezvousTest, OrderStartsWithThePickAndListsEveryServerOnce) {
  std::vector<std::string> four = {"10.0.0.1:7470", "10.0.0.2:7470", "10.0.0.3:7470",
                                   "10.0.0.4:7470"};
  std::vector<std::string> without_owner;
  for (uint32_t i = 0; i < 500; ++i) {
    const std::vector<size_t> order = RendezvousOrder(four, Key(i));
    ASSERT_EQ(order.size(), 4u);
    EXPECT_EQ(order[0], RendezvousPick(four, Key(i)));
    EXPECT_EQ(std::set<size_t>(order.begin(), order.end()).size(), 4u);
    // The second choice is the owner once the first is gone (where failover goes).
    without_owner = four;
    without_owner.erase(without_owner.begin() + static_cast<std::ptrdiff_t>(order[0]));
    EXPECT_EQ(without_owner[RendezvousPick(without_owner, Key(i))], four[order[1]]) << i;
  }
}

TEST(RendezvousTest, SpreadsChainsAndMovesOnlyTheRemovedServersChains) {
  std::vector<std::string> three = {"10.0.0.1:7470", "10.0.0.2:7470", "10.0.0.3:7470"};
  std::vector<std::string> two = {"10.0.0.1:7470", "10.0.0.3:7470"};
  int counts[3] = {};
  for (uint32_t i = 0; i < 3000; ++i) {
    const size_t a = RendezvousPick(three, Key(i));
    counts[a]++;
    const size_t b = RendezvousPick(two, Key(i));
    if (a != 1) EXPECT_EQ(two[b], three[a]) << i;  // only server 2's chains move
  }
  for (int n : counts) EXPECT_GT(n, 800);  // ~1000 each
}

}  // namespace
}  // namespace kvstash::server
