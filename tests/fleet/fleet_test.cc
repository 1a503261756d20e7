// The fleet shape of docker/compose.yaml, on real processes in network namespaces
// (issue 20 §3): three kvstash-server nodes, each in its own namespace with its own
// address (10.77.0.1-3, ports 7470/7471), a Redis Cluster of 3 masters with one
// replica each as the shared T2 (one namespace, 10.77.0.5, ports 7001-7006,
// cluster-node-timeout 1000 ms), and the clients in a fourth namespace (10.77.0.4:
// the test's main thread enters it, so every client socket opens there), routing by
// rendezvous hashing. Every node has a small T1 (8 MiB), so most chunks are demoted
// to the shared tier.
//
// Under load from 4 client threads (fleet_load.h: SmolLM2-sized chunks whose bytes are
// a function of their key): kill -9 one node (its chains fail over, misses not
// errors, within the call deadline), restart it (it serves its acknowledged chains
// again), kill it and delete its disk before restarting (it serves them from T2), take
// its host off the network (link down: calls fail over once it stops acknowledging), add
// a fourth node (about 1/4 of the chains move; moved chains are found in T2), kill one
// Redis master (T2 degrades, the replica takes over, T2 recovers). Wrong KV and
// errors must be 0 throughout; every phase prints its counts.
//
// Needs root, iproute2 and redis-server; skips with a message otherwise.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>

#include "kvstash/client.h"
#include "server/config.h"
#include "tests/fleet/fleet_load.h"
#include "tests/fleet/netns_lab.h"
#include "tests/server/http_get.h"
#include "tests/server/server_process.h"
#include "tests/store/store_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::testing {
namespace {

using server::testing::HttpGet;
using server::testing::ServerLaunch;
using server::testing::ServerProcess;
using store::testing::ClusterLaunch;
using store::testing::RedisReplyText;
using store::testing::RedisServer;

constexpr int kPort = 7470, kHttpPort = 7471, kRedisPort = 7001;
constexpr int kThreads = 4;
constexpr auto kDeadline = std::chrono::milliseconds(2000);
constexpr uint64_t kDiskBudget = 8u << 20, kMemoryBudget = 4u << 20;

void Report(const char* phase, const LoadCounts& c) {
  std::printf("[fleet] %-28s %s\n", phase, c.ToString().c_str());
  std::fflush(stdout);
}

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = NetnsLab::Unsupported(); !why.empty()) {
      GTEST_SKIP() << "fleet test skipped: " << why;
    }
    if (!store::testing::RedisInstalled()) {
      GTEST_SKIP() << "fleet test skipped: redis-server/redis-cli not installed";
    }
    const int swept = NetnsLab::SweepStale();
    if (swept > 0) std::printf("[fleet] removed %d stale namespaces\n", swept);
    ASSERT_OK_AND_ASSIGN(lab_, NetnsLab::Create());
    for (int i = 0; i < 6; ++i) ASSERT_OK(lab_->AddHost().status());
    node_host_ = {0, 1, 2, 5};  // node 3 is the one added later
    ASSERT_OK_AND_ASSIGN(entered_, lab_->Enter(kClientHost));
    ClusterLaunch shape;
    shape.node.launcher = lab_->Launcher(kRedisHost);
    shape.node.host = lab_->address(kRedisHost);
    shape.node.port = kRedisPort;
    shape.node.cluster_node_timeout_ms = 1000;
    shape.replicas_per_master = 1;
    std::string error;
    std::filesystem::create_directories(dir_.path() + "/redis");
    ASSERT_TRUE(store::testing::StartCluster(dir_.path() + "/redis", &redis_, &error, shape))
        << error;
    nodes_.resize(node_host_.size());
    for (size_t i = 0; i < 3; ++i) ASSERT_OK(StartNode(i));
  }

  std::string NodeAddress(size_t i) const {
    return lab_->address(node_host_[i]) + ":" + std::to_string(kPort);
  }
  std::string DataDir(size_t i) const { return dir_.path() + "/node-" + std::to_string(i) + "-db"; }

  // (Re)starts node i on its fixed address, its data in DataDir(i).
  Status StartNode(size_t i) {
    const std::string run = dir_.path() + "/node-" + std::to_string(i);
    std::filesystem::create_directories(run);
    nlohmann::json endpoints = nlohmann::json::array();
    for (const auto& r : redis_) endpoints.push_back(r->endpoint());
    const nlohmann::json config = {
        {"server_id", "kvstash-" + std::to_string(i + 1)},
        {"store",
         {{"path", DataDir(i)},
          {"memory_budget_bytes", kMemoryBudget},
          {"disk_budget_bytes", kDiskBudget},
          {"redis", {{"endpoints", endpoints}}}}}};
    std::ofstream(run + "/kvstash-server.json") << config.dump(2);
    ServerLaunch launch;
    launch.launcher = lab_->Launcher(node_host_[i]);
    launch.host = lab_->address(node_host_[i]);
    launch.port = kPort;
    launch.http_port = kHttpPort;
    nodes_[i] = std::make_unique<ServerProcess>();
    return nodes_[i]->Start(KVSTASH_SERVER_BIN, run,
                            {"--config", run + "/kvstash-server.json", "--tenant", "fleet=secret"},
                            launch);
  }

  // Sets node i's host link "up" or "down" (down: packets vanish, no RST). Whether `ip`
  // succeeded; its output is printed when not.
  ::testing::AssertionResult SetLink(size_t i, const char* state) const {
    std::string out;
    if (store::testing::RunProgram({"ip", "-n", lab_->name(node_host_[i]), "link", "set", "eth0", state},
                                   &out) == 0) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "ip link set eth0 " << state << ": " << out;
  }

  // Node i's server-wide /v1/stats (null when it does not answer).
  nlohmann::json NodeStats(size_t i) const {
    return nlohmann::json::parse(
        HttpGet(kHttpPort, "/v1/stats", lab_->address(node_host_[i])).second, nullptr, false);
  }
  // Sum over nodes [0, n) of tiers[tier][field].
  uint64_t SumTier(size_t n, int tier, const char* field) const {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; ++i) {
      const nlohmann::json s = NodeStats(i);
      if (s.is_object()) sum += s["tiers"][tier][field].get<uint64_t>();
    }
    return sum;
  }

  std::unique_ptr<Client> MakeClient(size_t n_nodes) {
    ClientOptions o;
    for (size_t i = 0; i < n_nodes; ++i) o.servers.push_back(NodeAddress(i));
    o.tenant = "fleet";
    o.credential = "secret";
    o.default_deadline = kDeadline;
    // Scaled to the 2 s deadline: a vanished host is noticed after 0.5 s.
    o.connect_timeout = std::chrono::milliseconds(500);
    o.unacked_timeout = std::chrono::milliseconds(500);
    return Client::Create(o).value();
  }

  // Fails the test unless every call of `c` stayed correct and within the deadline.
  static void ExpectClean(const LoadCounts& c) {
    EXPECT_EQ(c.wrong.load(), 0u) << "a client read another chunk's bytes";
    EXPECT_EQ(c.errors.load(), 0u) << "calls failed instead of missing";
    EXPECT_LE(c.max_latency_us.load(),
              static_cast<uint64_t>(std::chrono::microseconds(kDeadline).count()));
  }

  static constexpr size_t kClientHost = 3, kRedisHost = 4;
  // Destroyed in reverse: servers, Redis, files, then the namespaces.
  std::unique_ptr<NetnsLab> lab_;
  std::unique_ptr<NetnsLab::Entered> entered_;
  server::testing::TempDir dir_;
  std::vector<std::unique_ptr<RedisServer>> redis_;
  std::vector<size_t> node_host_;
  std::vector<std::unique_ptr<ServerProcess>> nodes_;
};

TEST_F(FleetTest, NodesFailOverRestartGrowAndSurviveARedisMasterFailover) {
  const auto started = std::chrono::steady_clock::now();
  auto client = MakeClient(3);
  const CallOptions call;
  const std::vector<FleetChain> chains = MakeFleetChains(1, 240, 2);
  std::vector<size_t> owner(chains.size());
  for (size_t c = 0; c < chains.size(); ++c) owner[c] = client->ServerFor(chains[c].keys[0]);
  constexpr size_t kVictim = 1;

  // 1. Fill: every chain put once and read back.
  {
    LoadCounts fill;
    VisitAll(*client, chains, /*put_missing=*/true, kThreads, call, &fill);
    const std::vector<size_t> stored = VisitAll(*client, chains, false, kThreads, call, &fill);
    Report("fill + read back", fill);
    ExpectClean(fill);
    for (size_t c = 0; c < chains.size(); ++c) ASSERT_EQ(stored[c], 2u) << "chain " << c;
    EXPECT_EQ(fill.misses.load(), 2 * chains.size());  // the first visit's lookups only
  }
  std::vector<size_t> victims;  // the chains node kVictim owns, all acknowledged
  for (size_t c = 0; c < chains.size(); ++c) {
    if (owner[c] == kVictim) victims.push_back(c);
  }
  ASSERT_GT(victims.size(), 40u);
  // Visits chains[which] without putting; reports and checks the counts under
  // `phase`; returns how many chains were served whole.
  auto served = [&](Client& cl, const std::vector<size_t>& which, const char* phase) {
    std::vector<FleetChain> subset;
    for (size_t c : which) subset.push_back(chains[c]);
    LoadCounts counts;
    size_t whole = 0;
    for (size_t s : VisitAll(cl, subset, false, kThreads, call, &counts)) whole += s == 2;
    Report(phase, counts);
    std::printf("[fleet] %s: %zu of %zu chains served whole\n", phase, whole, which.size());
    ExpectClean(counts);
    return whole;
  };

  // 2. kill -9 a node under load, then restart it on its disk.
  {
    LoadCounts load;
    {
      LoadRun run(*client, chains, kThreads, call, &load);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ASSERT_EQ(nodes_[kVictim]->Kill(SIGKILL), 128 + SIGKILL);
      // Its chains while it is down: served by their second rendezvous choice (hits
      // from T2 where they had been demoted, misses otherwise), never errors.
      served(*client, victims, "dead node's chains");
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      ASSERT_OK(StartNode(kVictim));
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      std::printf("[fleet] kill/restart load: %llu chain visits\n",
                  static_cast<unsigned long long>(run.Stop()));
    }
    Report("kill -9 node, restart", load);
    ExpectClean(load);
    EXPECT_EQ(served(*client, victims, "restarted node's chains"), victims.size());
  }

  // 3. kill -9 it again, delete its disk, restart: its chains come from T2.
  {
    nodes_[kVictim]->Kill(SIGKILL);
    std::filesystem::remove_all(DataDir(kVictim));
    ASSERT_OK(StartNode(kVictim));
    ASSERT_OK(client->Ping(kVictim));  // a connect that works clears the down mark
    const size_t whole = served(*client, victims, "node without its disk (T2)");
    EXPECT_GE(whole * 2, victims.size()) << "most of the node's chunks were demoted to T2";
    EXPECT_GT(NodeStats(kVictim)["tiers"][2]["hits"].get<uint64_t>(), 0u);
  }

  // 3b. The node's host drops off the network (link down: no RST, packets vanish): the
  // calls in flight to it fail over once its host stops acknowledging.
  {
    LoadCounts load;
    {
      LoadRun run(*client, chains, kThreads, call, &load);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ASSERT_TRUE(SetLink(kVictim, "down"));
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));
      ASSERT_TRUE(SetLink(kVictim, "up"));
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      run.Stop();
    }
    Report("host off the network", load);
    ExpectClean(load);
  }

  // 4. A fourth node: the chains whose rendezvous winner is the new node move, no other.
  {
    LoadCounts refill;
    VisitAll(*client, chains, true, kThreads, call, &refill);  // re-put what 3. lost
    ExpectClean(refill);
    ASSERT_OK(StartNode(3));
    auto grown = MakeClient(4);
    std::vector<size_t> moved, stayed;
    for (size_t c = 0; c < chains.size(); ++c) {
      const size_t now = grown->ServerFor(chains[c].keys[0]);
      if (now == owner[c]) {
        stayed.push_back(c);
      } else {
        EXPECT_EQ(now, 3u) << "chain " << c << " moved between old nodes";
        moved.push_back(c);
      }
    }
    const double fraction = static_cast<double>(moved.size()) / static_cast<double>(chains.size());
    std::printf("[fleet] fourth node: %zu of %zu chains moved (%.3f, expected ~0.25)\n",
                moved.size(), chains.size(), fraction);
    EXPECT_GE(fraction, 0.15);
    EXPECT_LE(fraction, 0.35);
    EXPECT_EQ(served(*grown, stayed, "4 nodes: chains that stayed"), stayed.size());
    // The new node finds the moved chains in T2 where they had been demoted.
    EXPECT_GE(served(*grown, moved, "4 nodes: moved chains") * 2, moved.size());
    client = std::move(grown);
  }

  // 5. Kill one Redis master under load: T2 degrades, its replica takes over, T2
  // recovers. Fresh chains keep the nodes demoting (writing T2) throughout.
  {
    std::vector<FleetChain> mixed = chains;
    for (FleetChain& c : MakeFleetChains(2, 160, 2)) mixed.push_back(std::move(c));
    auto redis_says = [&](int n, const char* cmd, const std::string& what) {
      return RedisReplyText(redis_[n]->host(), redis_[n]->port(), cmd).find(what) !=
             std::string::npos;
    };
    int master = -1, replica = -1;
    for (int n = 0; n < static_cast<int>(redis_.size()); ++n) {
      if (master < 0 && redis_says(n, "INFO replication", "role:master")) master = n;
    }
    ASSERT_GE(master, 0);
    const std::string of_master = "master_port:" + std::to_string(redis_[master]->port());
    for (int n = 0; n < static_cast<int>(redis_.size()); ++n) {
      if (redis_says(n, "INFO replication", of_master)) replica = n;
    }
    ASSERT_GE(replica, 0);
    LoadCounts load;
    uint64_t errors_before = 0, errors_failover = 0, errors_after = 0, demoted_failover = 0,
             demoted_after = 0;
    double failover_s = 0;
    {
      LoadRun run(*client, mixed, kThreads, call, &load);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      errors_before = SumTier(4, 2, "errors");
      redis_[master]->Kill();
      const auto killed = std::chrono::steady_clock::now();
      bool took_over = false;
      while (!took_over && std::chrono::steady_clock::now() - killed < std::chrono::seconds(20)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        took_over = redis_says(replica, "INFO replication", "role:master") &&
                    redis_says(replica, "CLUSTER INFO", "cluster_state:ok");
      }
      failover_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
      ASSERT_TRUE(took_over) << "the replica did not take over within 20 s";
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // routers re-read slots
      errors_failover = SumTier(4, 2, "errors");
      demoted_failover = SumTier(4, 1, "evictions");
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      errors_after = SumTier(4, 2, "errors");
      demoted_after = SumTier(4, 1, "evictions");
      run.Stop();
    }
    Report("redis master killed", load);
    std::printf("[fleet] redis failover after %.1f s; T2 errors: %llu before, +%llu while "
                "degraded, +%llu after the failover; T1 demotions after it: %llu\n",
                failover_s, static_cast<unsigned long long>(errors_before),
                static_cast<unsigned long long>(errors_failover - errors_before),
                static_cast<unsigned long long>(errors_after - errors_failover),
                static_cast<unsigned long long>(demoted_after - demoted_failover));
    ExpectClean(load);
    EXPECT_EQ(errors_after, errors_failover) << "T2 still failing after the failover";
    EXPECT_GT(demoted_after, demoted_failover) << "no demotions to T2 after the failover";
    for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(NodeStats(i)["tiers"][2]["up"].get<bool>()) << i;
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("[fleet] scenario took %.1f s\n", total_s);
  EXPECT_LT(total_s, 120.0);
}

// Whether every thread of process `pid` is stopped (/proc/PID/task/*/stat state T)
// within `wait`.
bool AllThreadsStopped(pid_t pid, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream in(t.path() / "stat");
      const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t close = stat.rfind(") ");  // the state follows the parenthesised name
      all = all && close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
    }
    if (!ec && all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A node's host that acknowledged a request and then vanished (process stopped, link
// down: no reply, no RST, and no unacknowledged bytes of ours for TCP_USER_TIMEOUT to
// notice): the client's liveness probe (client/client_connection.h) ends the connection
// after about 2 x unacked_timeout and the call fails over to the chain's second
// server, well within its deadline. Without the probe the call waits for its deadline
// (DeadlineExceeded at 2 s): the race that phase 3b of the scenario above lost 4 times
// in one CI run.
TEST_F(FleetTest, HostGoneAfterAcknowledgingARequestFailsOverBeforeTheDeadline) {
  auto client = MakeClient(3);
  const CallOptions call;
  const std::vector<FleetChain> chains = MakeFleetChains(3, 30, 1);
  LoadCounts fill;
  VisitAll(*client, chains, /*put_missing=*/true, kThreads, call, &fill);
  ExpectClean(fill);
  constexpr size_t kVictim = 1;
  const FleetChain* chain = nullptr;
  for (const FleetChain& c : chains) {
    if (client->ServerFor(c.keys[0]) == kVictim) chain = &c;
  }
  ASSERT_NE(chain, nullptr);
  ASSERT_OK(client->Ping(kVictim));
  nodes_[kVictim]->Signal(SIGSTOP);  // its kernel still acknowledges what we send
  // kill() returns before every thread has stopped (a loaded CI machine answered the GET
  // below in that window): wait until each thread of the server shows state T.
  ASSERT_TRUE(AllThreadsStopped(nodes_[kVictim]->pid(), std::chrono::seconds(5)));
  const auto sent = std::chrono::steady_clock::now();
  auto reply = client->GetAsync(chain->keys[0], chain->keys[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(reply.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  ASSERT_TRUE(SetLink(kVictim, "down"));
  Result<GetResult> got = reply.get();
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  std::printf("[fleet] GET to a host gone after acknowledging it: %s after %.2f s\n",
              got.ok() ? "hit" : got.status().ToString().c_str(), waited_s);
  // The second server has the chunk in T2 (a hit, its own bytes) or not (a miss).
  if (got.ok()) {
    EXPECT_EQ(got->payload, ExpectedPayload(chain->keys[0]));
  } else {
    EXPECT_TRUE(got.status().IsNotFound()) << got.status().ToString();
  }
  // Probe after 0.5 s of silence, aborted about 0.9 s later (1.43 s measured), then
  // the second server.
  EXPECT_LT(waited_s, 1.8);
  ASSERT_TRUE(SetLink(kVictim, "up"));
  nodes_[kVictim]->Signal(SIGCONT);
}

// docker/compose.yaml and the config it gives its nodes describe the shape FleetTest
// runs: three kvstash nodes with their own names and server ids, six Redis nodes
// joined as 3 masters with one replica each, every Redis node a T2 endpoint.
TEST(FleetComposeTest, ComposeFileHasTheShapeTheFleetTestRuns) {
  const std::string dir = std::string(KVSTASH_SOURCE_DIR) + "/docker/";
  std::ifstream in(dir + "compose.yaml");
  ASSERT_TRUE(in) << dir << "compose.yaml";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::regex kvstash_service(
      R"re(\n  kvstash-([0-9]+):\n    <<: \*kvstash-node\n)re"
      R"re(    command: \[[^\]]*"--server-id", "kvstash-([0-9]+)"\])re");
  const std::regex redis_service(R"(\n  redis-[0-9]+: \*redis-node(?=\n))");
  size_t nodes = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kvstash_service);
       it != std::sregex_iterator(); ++it, ++nodes) {
    EXPECT_EQ((*it)[1], (*it)[2]) << "service and server id differ";
  }
  EXPECT_EQ(nodes, 3u);
  const auto redis = std::distance(std::sregex_iterator(text.begin(), text.end(), redis_service),
                                   std::sregex_iterator());
  EXPECT_EQ(redis, 6);
  EXPECT_NE(text.find("--cluster-replicas 1 "), std::string::npos);
  EXPECT_NE(text.find("tests/fleet/fleet_test.cc"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(server::ServerConfig config,
                       server::LoadServerConfig(dir + "kvstash-server.json"));
  std::vector<std::string> endpoints = config.store["redis"]["endpoints"];
  std::vector<std::string> want;
  for (int i = 1; i <= 6; ++i) want.push_back("redis-" + std::to_string(i) + ":6379");
  EXPECT_EQ(endpoints, want);
}

}  // namespace
}  // namespace kvstash::testing
