// End-to-end tests: real kvstash-server processes (RocksDB + memory tiers) on loopback
// ports chosen at run time, driven by the client library and plain HTTP.
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <mutex>

#include "kvstash/client.h"
#include "kvstash/payload_format.h"
#include "server/tenants.h"
#include "store/redis_router.h"
#include "tests/server/http_get.h"
#include "tests/server/server_process.h"
#include "tests/server/test_payloads.h"
#include "tests/store/store_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::server {
namespace {

using testing::HttpGet;
using testing::Key;
using testing::Bound;
using testing::RawPayload;
using testing::ServerProcess;
using testing::TempDir;

std::unique_ptr<Client> Connect(const ServerProcess& s, const std::string& tenant,
                                const std::string& cred, uint32_t conns = 2) {
  ClientOptions o;
  o.servers = {s.address()};
  o.tenant = tenant;
  o.credential = cred;
  o.connections_per_server = conns;
  o.default_deadline = std::chrono::milliseconds(5000);
  o.max_attempts = 1;
  return Client::Create(o).value();
}

kvstash::PutChunk Chunk(uint32_t key, std::optional<uint32_t> parent, std::vector<uint8_t> payload) {
  kvstash::PutChunk p;
  p.route = Key(1);
  p.key = Key(key);
  if (parent) p.parent = Key(*parent);
  p.payload = std::move(payload);
  return p;
}

const std::vector<std::string> kTenants = {"--tenant", "a=pa", "--tenant", "b=pb"};

std::vector<std::string> Args(const TempDir& dir) {
  std::vector<std::string> a = kTenants;
  a.insert(a.end(), {"--data-dir", dir.path() + "/db", "--memory-budget", "67108864"});
  return a;
}

TEST(E2eTest, EveryOpcodeTenantsAndHttpAgainstTheRealStore) {
  TempDir dir;
  ServerProcess s;
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), Args(dir)));
  auto a = Connect(s, "a", "pa");
  auto b = Connect(s, "b", "pb");
  ASSERT_OK(a->Ping(0));
  for (const auto& [cred, given] : {std::pair{"", "no credential given"}, std::pair{"pb", "a credential given"}}) {
    // A refused HELLO names who the client said it was.
    const Status refused = Connect(s, "a", cred)->Ping(0);
    EXPECT_STATUS(refused, kPermissionDenied);
    EXPECT_NE(refused.message().find(std::string("HELLO as tenant 'a', ") + given), std::string::npos)
        << refused.message();
  }
  ASSERT_OK(a->Put(Chunk(1, std::nullopt, RawPayload(16, 1))));
  ASSERT_OK(a->Put(Chunk(2, 1, RawPayload(16, 2))));
  {  // parent missing: the message names the client's own keys, never the scoped ones
    const Status miss = a->Put(Chunk(4, 3, RawPayload(16, 4)));
    EXPECT_STATUS(miss, kNotFound);
    EXPECT_NE(miss.message().find(ToHex(Key(3))), std::string::npos) << miss.message();
    for (const StoredKey& k : {Key(3), Key(4)}) {
      EXPECT_EQ(miss.message().find(ToHex(ScopeKey("a", k))), std::string::npos) << miss.message();
    }
  }
  std::vector<ChunkRef> chain = {{Key(1), 16}, {Key(2), 16}, {Key(3), 16}};
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult la, a->Lookup(chain));
  EXPECT_EQ(la.matched_chunks, 2u);
  EXPECT_EQ(la.matched_tokens, 32u);
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult lb, b->Lookup(chain));
  EXPECT_EQ(lb.matched_chunks, 0u);
  EXPECT_STATUS(b->Get(Key(1), Key(1)), kNotFound);
  ASSERT_OK_AND_ASSIGN(GetResult g, a->Get(Key(1), Key(2), GetOptions{.decoded = true}));
  EXPECT_EQ(g.payload, Bound(RawPayload(16, 2), Key(2)));
  ASSERT_OK(a->Pin(Key(1), Key(1)));
  ASSERT_OK(a->Pin(Key(1), Key(1), false));
  ASSERT_OK_AND_ASSIGN(bool existed, a->Delete(Key(1), Key(1)));
  EXPECT_TRUE(existed);
  ASSERT_OK_AND_ASSIGN(la, a->Lookup(chain));
  EXPECT_EQ(la.matched_chunks, 0u);  // the descendant went too
  auto stats = nlohmann::json::parse(a->Stats(0).value());  // tenant a's own traffic
  EXPECT_EQ(stats["requests"]["PUT"]["count"], 3);
  EXPECT_EQ(stats["lookup"]["tokens_hit"], 32);
  EXPECT_EQ(stats["lookup"]["lookups"], 2);  // b's LOOKUP is not a's
  EXPECT_FALSE(stats.contains("tiers"));

  auto [st, metrics] = HttpGet(s.http_port(), "/metrics");
  EXPECT_EQ(st, "HTTP/1.1 200 OK");
  EXPECT_NE(metrics.find("kvstash_requests_total{op=\"PUT\"} 3"), std::string::npos);
  EXPECT_NE(metrics.find("kvstash_tier_bytes{tier=\"T1\"}"), std::string::npos);
  auto [st2, json] = HttpGet(s.http_port(), "/v1/stats");
  EXPECT_EQ(nlohmann::json::parse(json)["lookup"]["lookups"], 3);
  EXPECT_TRUE(nlohmann::json::parse(json)["tiers"][1]["enabled"].get<bool>());  // T1 (RocksDB)
  EXPECT_EQ(HttpGet(s.http_port(), "/healthz").second, "ok\n");
  // One history sample from start-up at least (default interval 5 s).
  auto history = nlohmann::json::parse(HttpGet(s.http_port(), "/v1/history").second);
  EXPECT_EQ(history["interval_ms"], 5000);
  EXPECT_GE(history["samples"].size(), 1u);
  EXPECT_NE(HttpGet(s.http_port(), "/dashboard").second.find("<canvas"), std::string::npos);
  EXPECT_EQ(HttpGet(s.http_port(), "/nope").first, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(s.Kill(SIGTERM), 0);  // clean drain
}

TEST(E2eTest, RestartKeepsData) {
  TempDir dir;
  {
    ServerProcess s;
    ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), Args(dir)));
    auto a = Connect(s, "a", "pa");
    ASSERT_OK(a->Put(Chunk(1, std::nullopt, RawPayload(64, 1))));
    for (uint32_t i = 2; i <= 10; ++i) ASSERT_OK(a->Put(Chunk(i, i - 1, RawPayload(64, i))));
    ASSERT_OK(a->Pin(Key(1), Key(1)));
    a.reset();
    // SIGHUP (a closed terminal) drains like SIGTERM: exit 0 (before: killed by the
    // signal's default action, no drain).
    EXPECT_EQ(s.Kill(SIGHUP), 0);
  }
  ServerProcess s;
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), Args(dir)));
  auto a = Connect(s, "a", "pa");
  std::vector<ChunkRef> chain;
  for (uint32_t i = 1; i <= 11; ++i) chain.push_back({Key(i), 64});
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult l, a->Lookup(chain));
  EXPECT_EQ(l.matched_chunks, 10u);
  for (uint32_t i = 1; i <= 10; ++i) {
    ASSERT_OK_AND_ASSIGN(GetResult g, a->Get(Key(1), Key(i)));
    EXPECT_EQ(g.payload, Bound(RawPayload(64, i), Key(i))) << i;
  }
  EXPECT_EQ(nlohmann::json::parse(HttpGet(s.http_port(), "/v1/stats").second)["pinned_entries"], 1);
}

// Payload + state bytes of every chunk hash in the single Redis node `endpoint`.
uint64_t RedisChunkBytes(const std::string& endpoint) {
  auto router = store::RedisRouter::Connect({{endpoint}, 500, 2000, 5}).value();
  store::RedisCommand keys{"", {"KEYS", "kvstash:*"}};
  auto listed = router->Execute(std::span(&keys, 1));
  EXPECT_TRUE(listed[0].ok());
  uint64_t bytes = 0;
  for (const store::RedisReply& k : listed[0]->elements) {
    for (const char* field : {"p", "s"}) {
      store::RedisCommand c{k.str, {"HSTRLEN", k.str, field}};
      auto r = router->Execute(std::span(&c, 1));
      EXPECT_TRUE(r[0].ok());
      if (r[0].ok()) bytes += static_cast<uint64_t>(r[0]->integer);
    }
  }
  return bytes;
}

// store.remote_budget_bytes bounds T2 (docs/format/store.md) and T2 evictions show in
// /metrics and /v1/stats: budgets of 2 / 4 / 6 chunks for T0 / T1 / T2, 40 PUTs.
TEST(E2eTest, RemoteBudgetBoundsRedisAndT2EvictionsAreCounted) {
  if (!store::testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
  TempDir dir;
  std::string error;
  auto redis = store::testing::RedisServer::Start(dir.path(), false, &error);
  ASSERT_TRUE(redis) << error;
  constexpr uint64_t kChunk = 2200;  // RawPayload(16, ...) as stored: 152-byte header + 16 x 128
  ASSERT_EQ(Bound(RawPayload(16, 1), Key(1)).size(), kChunk);
  const std::string config = dir.path() + "/c.json";
  std::ofstream(config) << "{\"store\": {\"path\": \"" << dir.path() << "/db\", "
                        << "\"memory_budget_bytes\": " << 2 * kChunk
                        << ", \"disk_budget_bytes\": " << 4 * kChunk
                        << ", \"remote_budget_bytes\": " << 6 * kChunk
                        << ", \"redis\": {\"endpoints\": [\"" << redis->endpoint() << "\"]}}}";
  ServerProcess s;
  std::vector<std::string> args = kTenants;
  args.insert(args.end(), {"--config", config});
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), args));
  auto a = Connect(s, "a", "pa");
  for (uint32_t i = 1; i <= 40; ++i) ASSERT_OK(a->Put(Chunk(i, std::nullopt, RawPayload(16, i))));
  EXPECT_LE(RedisChunkBytes(redis->endpoint()), 6 * kChunk);
  auto stats = nlohmann::json::parse(HttpGet(s.http_port(), "/v1/stats").second);
  const auto& t2 = stats["tiers"][2];
  EXPECT_EQ(t2["name"], "T2");
  EXPECT_LE(t2["bytes"].get<uint64_t>(), 6 * kChunk);
  EXPECT_EQ(t2["entries"], 6);
  EXPECT_EQ(t2["evictions"], 30);  // T1 demoted 36, T2 kept 6
  EXPECT_EQ(stats["tiers"][1]["evictions"], 36);
  const std::string metrics = HttpGet(s.http_port(), "/metrics").second;
  EXPECT_NE(metrics.find("kvstash_tier_evictions_total{tier=\"T2\"} 30\n"), std::string::npos)
      << metrics;
  // 10 chunks are left (4 in T1, 6 in T2); every GET hit is byte-exact, the rest are
  // misses (hits on T2 promote, demoting and evicting others), never wrong bytes.
  uint32_t matched = 0;
  for (uint32_t i = 1; i <= 40; ++i) {
    std::vector<ChunkRef> one = {{Key(i), 16}};
    ASSERT_OK_AND_ASSIGN(kvstash::LookupResult l, a->Lookup(one));
    matched += l.matched_chunks;
  }
  EXPECT_EQ(matched, 10u);
  int found = 0;
  for (uint32_t i = 1; i <= 40; ++i) {
    auto g = a->Get(Key(i), Key(i));
    if (!g.ok()) {
      EXPECT_STATUS(g, kNotFound);
      continue;
    }
    ++found;
    EXPECT_EQ(g->payload, Bound(RawPayload(16, i), Key(i))) << i;
  }
  EXPECT_GE(found, 1);
  EXPECT_LE(RedisChunkBytes(redis->endpoint()), 6 * kChunk);
}

// A PUT naming another parent for a stored key (here a cycle K1 -> K2 -> K1) is
// refused with Mismatch in the client's terms; both entries survive a kill -9.
TEST(E2eTest, APutThatReparentsAStoredKeyIsRefusedAndBothEntriesSurviveARestart) {
  TempDir dir;
  {
    ServerProcess s;
    ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), Args(dir)));
    auto a = Connect(s, "a", "pa");
    ASSERT_OK(a->Put(Chunk(1, std::nullopt, RawPayload(16, 1))));
    ASSERT_OK(a->Put(Chunk(2, 1, RawPayload(16, 2))));
    ASSERT_OK(a->Put(Chunk(3, std::nullopt, RawPayload(16, 3))));
    const Status cycle = a->Put(Chunk(1, 2, RawPayload(16, 1)));
    EXPECT_STATUS(cycle, kMismatch);
    EXPECT_NE(cycle.message().find("PUT " + ToHex(Key(1))), std::string::npos) << cycle.message();
    EXPECT_NE(cycle.message().find("one parent"), std::string::npos) << cycle.message();
    EXPECT_EQ(cycle.message().find(ToHex(ScopeKey("a", Key(1)))), std::string::npos);
    EXPECT_STATUS(a->Put(Chunk(2, 3, RawPayload(16, 2))), kMismatch);
    ASSERT_OK(a->Put(Chunk(2, 1, RawPayload(16, 22))));  // same parent: an overwrite
    s.Kill(SIGKILL);
  }
  ServerProcess s;
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), Args(dir)));
  auto a = Connect(s, "a", "pa");
  std::vector<ChunkRef> chain = {{Key(1), 16}, {Key(2), 16}};
  ASSERT_OK_AND_ASSIGN(kvstash::LookupResult l, a->Lookup(chain));
  EXPECT_EQ(l.matched_chunks, 2u);
  ASSERT_OK_AND_ASSIGN(GetResult g1, a->Get(Key(1), Key(1)));
  EXPECT_EQ(g1.payload, Bound(RawPayload(16, 1), Key(1)));
  ASSERT_OK_AND_ASSIGN(GetResult g2, a->Get(Key(1), Key(2)));
  EXPECT_EQ(g2.payload, Bound(RawPayload(16, 22), Key(2)));
  ASSERT_OK_AND_ASSIGN(bool existed, a->Delete(Key(3), Key(3)));  // K3 alone: K2 is not under it
  EXPECT_TRUE(existed);
  ASSERT_OK_AND_ASSIGN(l, a->Lookup(chain));
  EXPECT_EQ(l.matched_chunks, 2u);
}

TEST(E2eTest, SigtermTurnsHealthzTo503UntilExitAndRemovesTheReadyFile) {
  TempDir dir;
  ServerProcess s;
  std::vector<std::string> args = Args(dir);
  args.insert(args.end(), {"--drain-grace-ms", "800"});
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), args));
  EXPECT_TRUE(std::filesystem::exists(s.ready_file()));
  EXPECT_EQ(HttpGet(s.http_port(), "/healthz").second, "ok\n");
  auto a = Connect(s, "a", "pa");
  ASSERT_OK(a->Ping(0));
  s.Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(HttpGet(s.http_port(), "/healthz").first, "HTTP/1.1 503 Service Unavailable");
  ASSERT_OK(a->Put(Chunk(1, std::nullopt, RawPayload(16, 1))));  // still serving
  EXPECT_EQ(s.WaitExit(), 0);
  EXPECT_FALSE(std::filesystem::exists(s.ready_file()));
}

TEST(E2eTest, KillDashNineMidPutLeavesNoTornEntry) {
  TempDir dir;
  // 2 MiB payloads: PUTs take long enough on the wire and in the store that the kill
  // lands while several are in flight.
  const KvLayout big{16, 8, 64, DType::kBF16};  // 32 KiB per token
  std::map<uint32_t, std::vector<uint8_t>> sent;
  for (uint32_t i = 1; i <= 60; ++i) sent[i] = RawPayload(64, i, big);
  std::vector<uint32_t> acked;
  std::vector<Status> errors;
  {
    ServerProcess s;
    ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), Args(dir)));
    auto a = Connect(s, "a", "pa", 4);
    ASSERT_OK(a->Put(Chunk(1, std::nullopt, sent[1])));
    acked.push_back(1);
    // Kill the server as soon as a few of the pipelined PUTs have been acknowledged,
    // so the rest are on the wire or inside the store.
    std::mutex mu;
    std::condition_variable cv;
    int finished = 0;
    std::map<uint32_t, Status> results;
    for (uint32_t i = 2; i <= 60; ++i) {
      a->PutAsync(Chunk(i, 1, sent[i]), [&, i](Status st) {
        std::lock_guard<std::mutex> l(mu);
        results[i] = st;
        ++finished;
        cv.notify_all();
      });
    }
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return finished >= 3; });
    }
    s.Kill(SIGKILL);
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return finished == 59; });
    }
    for (auto& [i, st] : results) {
      if (st.ok()) acked.push_back(i);
      else errors.push_back(st);
    }
  }
  ASSERT_FALSE(errors.empty()) << "the kill came after every PUT finished; nothing tested";
  for (const Status& e : errors) EXPECT_TRUE(e.IsRetryable()) << e.ToString();
  ServerProcess s;
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), Args(dir)));
  auto a = Connect(s, "a", "pa");
  int present = 0;
  for (auto& [i, payload] : sent) {
    auto g = a->Get(Key(1), Key(i));
    const bool was_acked = std::find(acked.begin(), acked.end(), i) != acked.end();
    if (g.ok()) {
      ++present;
      EXPECT_EQ(g->payload, Bound(payload, Key(i))) << "entry " << i << " is torn";
      EXPECT_OK(ParsePayload(g->payload).status());
    } else {
      EXPECT_STATUS(g, kNotFound);
      EXPECT_FALSE(was_acked) << "acknowledged PUT " << i << " lost";
    }
  }
  EXPECT_GE(present, static_cast<int>(acked.size()));
  std::cerr << "kill -9: " << acked.size() << " PUTs acknowledged, " << errors.size()
            << " failed, " << present << " present after restart\n";
}

}  // namespace
}  // namespace kvstash::server
