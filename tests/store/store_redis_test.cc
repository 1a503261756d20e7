// T2 on real redis-server processes started by the test on free loopback ports: a
// single node, and a 3-node Redis Cluster (slot routing checked against the server's
// CLUSTER KEYSLOT, MOVED handling after a slot moves, a pool shared by two stores).
// Skips with a visible message when redis-server is not installed.
#include <gtest/gtest.h>

#include <hiredis/hiredis.h>

#include <random>
#include <thread>

#include "store/redis_router.h"
#include "store/redis_slot.h"
#include "store/redis_tier.h"
#include "store/store.h"
#include "tests/store/store_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::store::testing {
namespace {

bool Same(std::span<const uint8_t> a, const std::vector<uint8_t>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

RedisReply Call(RedisRouter& r, const std::string& key, std::vector<std::string> argv) {
  RedisCommand c{key, std::move(argv)};
  auto out = r.Execute(std::span(&c, 1));
  EXPECT_TRUE(out[0].ok()) << out[0].status().ToString();
  return out[0].ok() ? *out[0] : RedisReply{};
}

// Runs one command on the node at `port` itself (no routing).
RedisReply Admin(int port, const std::vector<std::string>& argv) {
  timeval tv{2, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  RedisReply out;
  out.type = RedisReply::Type::kError;
  if (c == nullptr || c->err) {
    if (c) redisFree(c);
    return out;
  }
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
  if (r != nullptr) {
    out.type = r->type == REDIS_REPLY_ERROR ? RedisReply::Type::kError
               : r->type == REDIS_REPLY_NIL  ? RedisReply::Type::kNil
                                             : RedisReply::Type::kString;
    if (r->str != nullptr) out.str.assign(r->str, r->len);
    freeReplyObject(r);
  }
  redisFree(c);
  return out;
}

// T1 with a small budget over T2: most chunks get demoted to Redis.
StoreOptions DemotingOptions(const std::string& path, std::vector<std::string> endpoints) {
  StoreOptions o;
  o.path = path;
  o.memory_budget_bytes = 12000;
  o.disk_budget_bytes = 30000;
  o.blob_min_bytes = 4096;
  o.redis.endpoints = std::move(endpoints);
  return o;
}

void ExerciseDemotionAndPromotion(const StoreOptions& o) {
  auto store = Store::Open(o).value();
  const Digest256 ns = TestNamespace();
  std::vector<Chain> chains;
  for (int i = 0; i < 8; ++i) {
    chains.push_back(MakeChain(ns, 300 + i, 2, 5000, 256, /*with_state=*/i % 2 == 0));
    ASSERT_OK(store->Put(chains.back().Puts()));
  }
  StoreStats s = store->Stats();
  EXPECT_LE(s.tiers[1].bytes, 30000u);
  EXPECT_GT(s.tiers[2].entries, 0u);
  EXPECT_GT(s.tiers[1].evictions, 0u);
  // Every chunk is still found (T2 holds the demoted ones), with exact bytes.
  for (const Chain& c : chains) {
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, c.tokens, 256, false));
    EXPECT_EQ(r.matched_tokens, 512u);
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(got[i].found);
      EXPECT_TRUE(Same(got[i].payload_bytes(), c.payloads[i]));
      EXPECT_TRUE(Same(got[i].state_bytes(), c.states[i]));
    }
  }
  s = store->Stats();
  EXPECT_GT(s.tiers[2].hits, 0u);
  EXPECT_GT(s.tiers[1].promotions, 0u);
  EXPECT_EQ(s.checksum_failures, 0u);
  EXPECT_EQ(s.tiers[2].errors, 0u);
}

// The single-node tests: each skips (visibly) without redis-server and starts its
// nodes with their files in dir_.
class StoreRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisInstalled()) GTEST_SKIP() << "redis-server/redis-cli not installed; scripts/setup.sh installs them";
  }
  // One redis-server (not a cluster) on `port`, or on a free port when 0; nullptr, with
  // the reason recorded as a test failure, when it does not come up.
  std::unique_ptr<RedisServer> StartNode(int port = 0) {
    std::string error;
    auto redis = RedisServer::Start(dir_.path(), false, &error, port);
    EXPECT_TRUE(redis) << error;
    return redis;
  }
  TempDir dir_;
};

TEST_F(StoreRedis, SingleNodeDemotionAndPromotion) {
  auto redis = StartNode();
  ASSERT_TRUE(redis);
  auto router = RedisRouter::Connect({{redis->endpoint()}, 500, 2000, 5}).value();
  EXPECT_FALSE(router->cluster());
  ExerciseDemotionAndPromotion(DemotingOptions(dir_.path() + "/db", {redis->endpoint()}));
}

TEST_F(StoreRedis, MemoryOnlyStoreDemotesToRedis) {
  auto redis = StartNode();
  ASSERT_TRUE(redis);
  StoreOptions o;
  o.memory_budget_bytes = 20000;
  o.redis.endpoints = {redis->endpoint()};
  auto store = Store::Open(o).value();
  const Digest256 ns = TestNamespace();
  std::vector<Chain> chains;
  for (int i = 0; i < 6; ++i) {
    chains.push_back(MakeChain(ns, 400 + i, 3, 3000));
    ASSERT_OK(store->Put(chains.back().Puts()));
  }
  EXPECT_GT(store->Stats().tiers[2].entries, 0u);
  for (const Chain& c : chains) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(got[i].found);
      EXPECT_TRUE(Same(got[i].payload_bytes(), c.payloads[i]));
    }
  }
}

TEST_F(StoreRedis, AStoreOpensWithRedisDownAndTheTierReconnects) {
  // A port where nothing listens yet.
  auto probe = StartNode();
  ASSERT_TRUE(probe);
  const int port = probe->port();
  probe.reset();
  StoreOptions o;
  o.memory_budget_bytes = 1 << 20;
  o.redis.endpoints = {"127.0.0.1:" + std::to_string(port)};
  o.redis.connect_timeout_ms = 100;
  auto store = Store::Open(o);
  ASSERT_OK(store.status());  // not Unavailable: T2 is down, the store serves without it
  EXPECT_FALSE((*store)->Stats().t2_up);
  const Chain c = MakeChain(TestNamespace(), 3, 3, 2000);
  ASSERT_OK((*store)->Put(c.Puts()));
  ASSERT_OK_AND_ASSIGN(auto got, (*store)->Get(c.stored()));
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].found);
    EXPECT_TRUE(Same(got[i].payload_bytes(), c.payloads[i]));
  }
  // A tier opened down fails its calls Unavailable at once.
  RedisOptions ro = o.redis;
  auto tier = RedisTier::Open(ro).value();
  EXPECT_FALSE(tier->up());
  EXPECT_EQ(tier->Delete(c.stored())[0].code(), Status::Code::kUnavailable);
  // Redis comes up on that port: both reconnect (backoff 250 ms, 500 ms, 1 s, ...).
  auto redis = StartNode(port);
  ASSERT_TRUE(redis);
  for (int i = 0; i < 100 && !(tier->up() && (*store)->Stats().t2_up); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(tier->up());
  EXPECT_TRUE((*store)->Stats().t2_up);
  MetaRecord m;
  m.tokens = 256;
  RedisTier::Item item{c.keys[0].stored(), m, std::make_shared<const std::string>("x"), nullptr};
  EXPECT_OK(tier->Put(std::span(&item, 1))[0]);
}

TEST_F(StoreRedis, CorruptRemoteCopyIsAMiss) {
  auto redis = StartNode();
  ASSERT_TRUE(redis);
  RedisOptions ro;
  ro.endpoints = {redis->endpoint()};
  auto tier = RedisTier::Open(ro).value();
  const Chain c = MakeChain(TestNamespace(), 5, 1, 2000);
  MetaRecord m;
  m.tokens = 256;
  m.payload_bytes = c.payloads[0].size();
  m.payload_checksum = 1234;  // wrong on purpose
  RedisTier::Item item{c.keys[0].stored(), m,
                       std::make_shared<const std::string>(c.payloads[0].begin(),
                                                           c.payloads[0].end()),
                       nullptr};
  ASSERT_OK(tier->Put(std::span(&item, 1))[0]);
  // A store that sees the key only remotely: a Lookup finds it, a Get refuses it.
  StoreOptions o;
  o.redis.endpoints = {redis->endpoint()};
  auto store = Store::Open(o).value();
  const StoredKey k = c.keys[0].stored();
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(std::span(&k, 1), false));
  EXPECT_EQ(r.keys.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(std::span(&k, 1)));
  EXPECT_FALSE(got[0].found);
  EXPECT_EQ(store->Stats().checksum_failures, 1u);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(std::span(&k, 1), false));
  EXPECT_EQ(r.keys.size(), 0u);  // the bad remote copy was deleted
}

// Bytes of every chunk hash under `prefix` on the single node `endpoint` (payload +
// state fields, as the store counts them), and the number of such hashes.
std::pair<uint64_t, uint64_t> RedisChunkBytes(const std::string& endpoint,
                                              const std::string& prefix = "kvstash:") {
  auto router = RedisRouter::Connect({{endpoint}, 500, 2000, 5}).value();
  const RedisReply keys = Call(*router, "", {"KEYS", prefix + "*"});
  EXPECT_EQ(keys.type, RedisReply::Type::kArray);
  uint64_t bytes = 0;
  for (const RedisReply& k : keys.elements) {
    for (const char* field : {"p", "s"}) {
      bytes += static_cast<uint64_t>(Call(*router, k.str, {"HSTRLEN", k.str, field}).integer);
    }
  }
  return {bytes, keys.elements.size()};
}

// docs/format/store.md: T2 is bounded by remote_budget_bytes. Budgets of 2 / 4 / 6
// chunks for T0 / T1 / T2 and 40 one-chunk Puts: T1 demotes 36 chunks, T2 must evict
// 30 of them (T2 entries that only Redis holds are removed) and Redis holds at most
// 6 chunks' bytes.
TEST_F(StoreRedis, RemoteBudgetIsEnforced) {
  auto redis = StartNode();
  ASSERT_TRUE(redis);
  constexpr uint64_t kChunk = 2184;  // a 16-token raw chunk of 128 bytes per position
  StoreOptions o;
  o.path = dir_.path() + "/db";
  o.memory_budget_bytes = 2 * kChunk;
  o.disk_budget_bytes = 4 * kChunk;
  o.remote_budget_bytes = 6 * kChunk;
  o.redis.endpoints = {redis->endpoint()};
  const Digest256 ns = TestNamespace();
  std::vector<Chain> chains;
  {
    auto store = Store::Open(o).value();
    for (int i = 0; i < 40; ++i) {
      chains.push_back(MakeChain(ns, 900 + i, 1, kChunk, 16));
      chains.back().payloads[0].resize(kChunk);  // exactly one chunk's bytes
      ASSERT_OK(store->Put(chains.back().Puts()));
    }
    const StoreStats s = store->Stats();
    EXPECT_LE(s.tiers[0].bytes, 2 * kChunk);
    EXPECT_LE(s.tiers[1].bytes, 4 * kChunk);
    EXPECT_LE(s.tiers[2].bytes, 6 * kChunk);
    EXPECT_EQ(s.tiers[2].entries, 6u);
    EXPECT_EQ(s.tiers[1].evictions, 36u);
    EXPECT_EQ(s.tiers[2].evictions, 30u);
    EXPECT_EQ(s.index_entries, 10u);  // 4 in T1 + 6 in T2; the other 30 are gone
    EXPECT_EQ(s.tiers[2].errors, 0u);
    const auto [bytes, hashes] = RedisChunkBytes(redis->endpoint());
    EXPECT_LE(bytes, 6 * kChunk);
    EXPECT_EQ(hashes, 6u);
    // 10 chunks are still found (Lookup is no access); every Get hit is byte-exact
    // (hits on T2 promote, which demotes and evicts others: the bound holds on).
    uint64_t matched = 0, found = 0;
    for (const Chain& c : chains) {
      ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, c.tokens, 16, false));
      matched += r.keys.size();
    }
    EXPECT_EQ(matched, 10u);
    for (const Chain& c : chains) {
      ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
      if (!got[0].found) continue;
      ++found;
      EXPECT_TRUE(Same(got[0].payload_bytes(), c.payloads[0]));
    }
    EXPECT_GE(found, 1u);
    EXPECT_LE(store->Stats().tiers[2].bytes, 6 * kChunk);
    EXPECT_LE(RedisChunkBytes(redis->endpoint()).first, 6 * kChunk);
    EXPECT_EQ(store->Stats().checksum_failures, 0u);
  }
  // After a restart the bound still holds (the index is rebuilt from T1's meta).
  {
    auto store = Store::Open(o).value();
    EXPECT_LE(store->Stats().tiers[2].bytes, 6 * kChunk);
    EXPECT_LE(RedisChunkBytes(redis->endpoint()).first, 6 * kChunk);
  }
  // Reopened with a smaller budget: Open evicts down to it.
  o.remote_budget_bytes = 2 * kChunk;
  auto store = Store::Open(o).value();
  const StoreStats s = store->Stats();
  EXPECT_LE(s.tiers[2].bytes, 2 * kChunk);
  EXPECT_GE(s.tiers[2].evictions, 1u);
  EXPECT_LE(RedisChunkBytes(redis->endpoint()).first, 2 * kChunk);
}

// Found by the crash campaign (scripts/crash_campaign.sh): a Redis copy the index no
// longer tracks is served by Get and Lookup (T2 is a shared pool) and so resurrects a
// deleted or overwritten chunk. Here Redis is paused while a promoted chunk (in T1,
// its copy still in Redis) is overwritten, so the old copy's delete fails: the store
// must keep knowing of that copy, never serve it, and delete it with the chunk.
TEST_F(StoreRedis, AnOverwrittenChunksOldRedisCopyIsNeverServedOrResurrected) {
  auto redis = StartNode();
  ASSERT_TRUE(redis);
  StoreOptions o;
  o.path = dir_.path() + "/db";
  o.memory_budget_bytes = 1 << 20;
  o.disk_budget_bytes = 2 * 3000;
  o.redis.endpoints = {redis->endpoint()};
  o.redis.command_timeout_ms = 300;
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 61, 1, 3000), f1 = MakeChain(ns, 62, 1, 3000),
              f2 = MakeChain(ns, 63, 1, 3000);
  const std::vector<uint8_t> v2 = Bytes(64, 3000);
  auto store = Store::Open(o).value();
  ASSERT_OK(store->Put(a.Puts()));
  ASSERT_OK(store->Put(f1.Puts()));
  ASSERT_OK(store->Put(f2.Puts()));  // T1 holds 2: A (the oldest) went to T2
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(a.stored()));
  ASSERT_TRUE(got[0].found);
  EXPECT_EQ(got[0].tier, Tier::kRemote);  // promoted back to T1; Redis keeps its copy
  ASSERT_EQ(Admin(redis->port(), {"CLIENT", "PAUSE", "8000", "WRITE"}).type,
            RedisReply::Type::kString);
  PutChunk p = a.Puts()[0];
  p.payload = v2;
  ASSERT_OK(store->Put(std::span(&p, 1)));  // the old copy's DEL times out (retries too)
  EXPECT_GE(store->Stats().tiers[2].errors, 1u);
  Admin(redis->port(), {"CLIENT", "UNPAUSE"});
  ASSERT_OK_AND_ASSIGN(got, store->Get(a.stored()));
  ASSERT_TRUE(got[0].found);
  EXPECT_TRUE(Same(got[0].payload_bytes(), v2));
  // Delete takes the old Redis copy with it: no Get or Lookup finds A afterwards.
  const StoredKey k = a.keys[0].stored();
  ASSERT_OK_AND_ASSIGN(uint64_t removed, store->Delete(std::span(&k, 1)));
  EXPECT_EQ(removed, 1u);
  ASSERT_OK_AND_ASSIGN(got, store->Get(a.stored()));
  EXPECT_FALSE(got[0].found) << "a deleted chunk came back from Redis";
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(std::span(&k, 1), false));
  EXPECT_EQ(r.keys.size(), 0u);
}

class StoreRedisCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisInstalled()) GTEST_SKIP() << "redis-server/redis-cli not installed";
    std::string error;
    ASSERT_TRUE(StartCluster(dir_.path(), &nodes_, &error)) << error;
  }
  std::vector<std::string> Endpoints() const {
    std::vector<std::string> e;
    for (const auto& n : nodes_) e.push_back(n->endpoint());
    return e;
  }
  TempDir dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

TEST_F(StoreRedisCluster, SlotsMatchTheServerAndKeysSpreadOverNodes) {
  auto router = RedisRouter::Connect({{nodes_[0]->endpoint()}, 500, 2000, 5}).value();
  EXPECT_TRUE(router->cluster());
  EXPECT_EQ(router->node_count(), 3u);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 300; ++i) {
    std::string key = "kvstash:" + std::to_string(rng());
    if (i % 10 == 0) key = "{tag" + std::to_string(i) + "}:" + key;
    const RedisReply r = Call(*router, key, {"CLUSTER", "KEYSLOT", key});
    ASSERT_EQ(r.type, RedisReply::Type::kInteger);
    ASSERT_EQ(r.integer, RedisKeySlot(key)) << key;
  }
  // Writes and reads of 300 keys land on the right masters (no MOVED needed).
  std::vector<RedisCommand> sets, gets;
  for (int i = 0; i < 300; ++i) {
    const std::string key = "k" + std::to_string(i);
    sets.push_back({key, {"SET", key, "v" + std::to_string(i)}});
    gets.push_back({key, {"GET", key}});
  }
  for (auto& r : router->Execute(sets)) ASSERT_TRUE(r.ok());
  auto got = router->Execute(gets);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(got[i].ok());
    EXPECT_EQ(got[i]->str, "v" + std::to_string(i));
  }
  EXPECT_EQ(router->redirects(), 0u);
}

TEST_F(StoreRedisCluster, FollowsMovedAfterASlotChangesOwner) {
  auto router = RedisRouter::Connect({{nodes_[0]->endpoint()}, 500, 2000, 5}).value();
  const std::string key = "moved-key";
  const int64_t slot = RedisKeySlot(key);
  // Find the slot's owner (the router's own CLUSTER SLOTS view: a write goes there
  // without a redirection) and move the (empty) slot to another node with
  // CLUSTER SETSLOT NODE on every node.
  std::vector<std::string> ids;
  for (const auto& n : nodes_) ids.push_back(Admin(n->port(), {"CLUSTER", "MYID"}).str);
  int owner = -1;
  for (int n = 0; n < 3; ++n) {
    // Non-owners answer MOVED to a GET of the key.
    const RedisReply r = Admin(nodes_[n]->port(), {"GET", key});
    if (r.type != RedisReply::Type::kError) owner = n;
  }
  ASSERT_GE(owner, 0);
  const int target = (owner + 1) % 3;
  for (int n = 0; n < 3; ++n) {
    const RedisReply r = Admin(nodes_[n]->port(),
                               {"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", ids[target]});
    ASSERT_NE(r.type, RedisReply::Type::kError) << r.str;
  }
  // The router still maps the slot to the old owner: its first try gets MOVED.
  const RedisReply set = Call(*router, key, {"SET", key, "after-move"});
  EXPECT_EQ(set.str, "OK");
  EXPECT_GE(router->redirects(), 1u);
  const RedisReply get = Call(*router, key, {"GET", key});
  EXPECT_EQ(get.str, "after-move");
  // The value lives on the new owner.
  EXPECT_EQ(Admin(nodes_[target]->port(), {"GET", key}).str, "after-move");
}

TEST(StoreRedisFailover, RouterFollowsAReplicaThatTookOverADeadMaster) {
  if (!RedisInstalled()) GTEST_SKIP() << "redis-server/redis-cli not installed";
  TempDir dir;
  std::vector<std::unique_ptr<RedisServer>> nodes;
  std::string error;
  ClusterLaunch shape;
  shape.replicas_per_master = 1;
  shape.node.cluster_node_timeout_ms = 1000;
  ASSERT_TRUE(StartCluster(dir.path(), &nodes, &error, shape)) << error;
  std::vector<std::string> endpoints;
  for (const auto& n : nodes) endpoints.push_back(n->endpoint());
  auto router = RedisRouter::Connect({endpoints, 500, 2000, 5}).value();
  std::vector<RedisCommand> sets, gets;
  for (int i = 0; i < 300; ++i) {
    const std::string key = "f" + std::to_string(i);
    sets.push_back({key, {"SET", key, "v" + std::to_string(i)}});
    gets.push_back({key, {"GET", key}});
  }
  for (auto& r : router->Execute(sets)) ASSERT_TRUE(r.ok());
  int master = -1;
  for (size_t n = 0; n < nodes.size() && master < 0; ++n) {
    if (RedisReplyText(nodes[n]->host(), nodes[n]->port(), "INFO replication")
            .find("role:master") != std::string::npos) {
      master = static_cast<int>(n);
    }
  }
  ASSERT_GE(master, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // replication is async
  nodes[master]->Kill();
  // Degraded until a replica takes over (about the node timeout); then every key reads
  // again, and a value is never another key's.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  size_t readable = 0;
  while (std::chrono::steady_clock::now() < until) {
    auto got = router->Execute(gets);
    readable = 0;
    for (int i = 0; i < 300; ++i) {
      if (!got[i].ok()) continue;
      ASSERT_EQ(got[i]->str, "v" + std::to_string(i));
      ++readable;
    }
    if (readable == 300) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(readable, 300u) << "the router did not follow the failover";
  for (auto& r : router->Execute(sets)) EXPECT_TRUE(r.ok()) << r.status().ToString();
}

TEST_F(StoreRedisCluster, DemotionPromotionAndAPoolSharedByTwoStores) {
  TempDir a_dir, b_dir;
  ExerciseDemotionAndPromotion(DemotingOptions(a_dir.path() + "/first", Endpoints()));
  // A second node (its own T1) finds chunks the first demoted, through the shared pool.
  const Digest256 ns = TestNamespace();
  StoreOptions oa = DemotingOptions(a_dir.path() + "/a", Endpoints());
  StoreOptions ob = DemotingOptions(b_dir.path() + "/b", Endpoints());
  auto a = Store::Open(oa).value();
  auto b = Store::Open(ob).value();
  std::vector<Chain> chains;
  for (int i = 0; i < 8; ++i) {
    chains.push_back(MakeChain(ns, 500 + i, 2, 5000));
    ASSERT_OK(a->Put(chains.back().Puts()));
  }
  const StoreStats sa = a->Stats();
  ASSERT_GT(sa.tiers[2].entries, 0u);
  uint64_t remote_hits = 0;
  for (const Chain& c : chains) {
    ASSERT_OK_AND_ASSIGN(LookupResult r, b->Lookup(ns, c.tokens, 256, false));
    ASSERT_OK_AND_ASSIGN(auto got, b->Get(r.keys));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].found);
      EXPECT_TRUE(Same(got[i].payload_bytes(), c.payloads[i]));
      remote_hits += got[i].tier == Tier::kRemote;
    }
  }
  EXPECT_GT(remote_hits, 0u);
  EXPECT_GT(b->Stats().tiers[1].promotions, 0u);  // B copied them into its own T1
}

}  // namespace
}  // namespace kvstash::store::testing
