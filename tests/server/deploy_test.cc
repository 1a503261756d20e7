// The operators' kit in deploy/ against real tools: promtool checks the rules, the
// example configuration and the rules' unit tests (and a broken expectation fails
// them); a real Prometheus (Debian's `prometheus`) scrapes a running kvstash-server
// under traffic of known hit rates, evaluates the recording rules to those rates, runs
// every Grafana panel query without an error, and turns KvstashDown pending once the
// server is killed. Skips with a visible message when Prometheus is not installed.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "kvstash/client.h"
#include "tests/server/http_get.h"
#include "tests/server/raw_chain.h"
#include "tests/server/server_process.h"
#include "tests/server/test_payloads.h"
#include "tests/support/test_util.h"

extern char** environ;

namespace kvstash::server {
namespace {

using nlohmann::json;
using testing::HttpGet;
using testing::UrlEncode;

const std::string kDeploy = std::string(KVSTASH_SOURCE_DIR) + "/deploy";
const std::string kRules = kDeploy + "/prometheus/kvstash-rules.yml";

bool Installed(const char* tool) {
  return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0;
}

// Runs `cmd` through the shell; returns {exit status, stdout + stderr}.
std::pair<int, std::string> Shell(const std::string& cmd) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(DeployTest, PromtoolChecksTheRulesTheConfigAndTheRuleUnitTests) {
  if (!Installed("promtool")) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  auto [rc, out] = Shell("promtool check rules " + kRules);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SUCCESS: 18 rules found"), std::string::npos) << out;
  std::tie(rc, out) = Shell("promtool check config " + kDeploy + "/prometheus/prometheus.yml");
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Shell("cd " + kDeploy + "/prometheus && promtool test rules kvstash-rules.test.yml");
  EXPECT_EQ(rc, 0) << out;

  // The unit tests can fail: one hand-derived value changed (n1's hit rate 0.6 -> 0.7).
  testing::TempDir dir;
  std::ifstream in(kDeploy + "/prometheus/kvstash-rules.test.yml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string from = "instance=\"n1\"}'\n            value: 0.6";
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "instance=\"n1\"}'\n            value: 0.7");
  std::filesystem::copy_file(kRules, dir.path() + "/kvstash-rules.yml");
  std::ofstream(dir.path() + "/broken.test.yml") << text;
  std::tie(rc, out) = Shell("cd " + dir.path() + " && promtool test rules broken.test.yml");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("kvstash:token_hit_rate:ratio_rate5m"), std::string::npos) << out;
}

// A free loopback TCP port (bound and released: another process could take it first,
// which the caller's start-up wait would then report).
int FreePort() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// A child process killed at destruction.
class Child {
 public:
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool Start(std::vector<std::string> argv) {
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    return posix_spawnp(&pid_, c[0], nullptr, nullptr, c.data(), environ) == 0;
  }

 private:
  pid_t pid_ = -1;
};

// Prometheus' instant query API: the result vector of `promql` (error: a test failure
// and an empty array).
json Query(int port, const std::string& promql) {
  auto [status, body] = HttpGet(port, "/api/v1/query?query=" + UrlEncode(promql), "127.0.0.1", true);
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") {
    ADD_FAILURE() << promql << ": " << status << " " << body;
    return json::array();
  }
  return j["data"]["result"];
}

// The value of the single sample `promql` returns whose labels include `label`=`value`
// (any sample when `label` is empty); NaN when none.
double Value(int port, const std::string& promql, const std::string& label = "",
             const std::string& value = "") {
  for (const json& s : Query(port, promql)) {
    if (label.empty() || s["metric"].value(label, "") == value) {
      return std::stod(s["value"][1].get<std::string>());
    }
  }
  return std::nan("");
}

// Waits until `promql` returns a sample (rules need two scrapes of moving counters).
bool WaitForSample(int port, const std::string& promql, int seconds) {
  for (int i = 0; i < seconds * 4; ++i) {
    if (!Query(port, promql).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

TEST(DeployTest, RealPrometheusScrapesAServerAndEvaluatesTheRulesAndDashboardQueries) {
  if (!Installed("prometheus")) GTEST_SKIP() << "prometheus not installed (Debian package prometheus)";
  testing::TempDir dir;
  testing::ServerProcess s;
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(), {"--tenant", "a=pa", "--tenant", "b=pb"}));

  const int prom_port = FreePort();
  std::ofstream(dir.path() + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
      << "rule_files: [\"" << kRules << "\"]\n"
      << "scrape_configs:\n  - job_name: kvstash\n    static_configs:\n"
      << "      - targets: [\"127.0.0.1:" << s.http_port() << "\"]\n";
  Child prom;
  ASSERT_TRUE(prom.Start({"prometheus", "--config.file=" + dir.path() + "/prometheus.yml",
                          "--storage.tsdb.path=" + dir.path() + "/tsdb",
                          "--web.listen-address=127.0.0.1:" + std::to_string(prom_port),
                          "--log.level=warn"}));
  bool ready = false;
  for (int i = 0; i < 120 && !ready; ++i) {
    ready = HttpGet(prom_port, "/-/ready", "127.0.0.1", true).first.find(" 200 ") != std::string::npos;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(ready) << "prometheus did not become ready on port " << prom_port;

  // Prometheus applies discovered targets in batches (every 5 s): wait for the first
  // scrape before the traffic, so the rates cover it.
  ASSERT_TRUE(WaitForSample(prom_port, "up{job=\"kvstash\"} == 1", 30))
      << HttpGet(prom_port, "/api/v1/targets", "127.0.0.1", true).second;

  // Traffic of known hit rates while Prometheus scrapes: tenant a stores 4 chunks of 16
  // tokens and looks up 8 (64 of 128 tokens hit: 0.5); tenant b stores 2 and looks up
  // those 2 (1.0). Server-wide (64 + 32) / (128 + 32) = 0.6.
  auto connect = [&](const char* tenant, const char* credential) {
    ClientOptions o;
    o.servers = {s.address()};
    o.tenant = tenant;
    o.credential = credential;
    return Client::Create(o).value();
  };
  auto a = connect("a", "pa"), b = connect("b", "pb");
  ASSERT_OK(testing::PutRawChain(*a, 4, 16));
  ASSERT_OK(testing::PutRawChain(*b, 2, 16));
  const std::vector<ChunkRef> chain = testing::RawChainRefs(8, 16), chain_b = testing::RawChainRefs(2, 16);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  int lookups = 0;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_OK(a->Lookup(chain).status());
    ASSERT_OK(b->Lookup(chain_b).status());
    ++lookups;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(WaitForSample(prom_port, "kvstash:token_hit_rate:ratio_rate5m", 30))
      << "samples: " << Query(prom_port, "kvstash_lookup_tokens_requested_total[5m]").dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two scrapes after the last lookup

  // A scrape can fall between one lookup's two counter updates: one lookup of error.
  const double tol = 1.0 / lookups + 1e-9;
  EXPECT_NEAR(Value(prom_port, "kvstash:token_hit_rate:ratio_rate5m"), 0.6, tol) << lookups;
  EXPECT_NEAR(Value(prom_port, "kvstash:fleet_token_hit_rate:ratio_rate5m"), 0.6, tol);
  EXPECT_NEAR(Value(prom_port, "kvstash:tenant_token_hit_rate:ratio_rate5m", "tenant", "a"), 0.5, tol);
  EXPECT_NEAR(Value(prom_port, "kvstash:tenant_token_hit_rate:ratio_rate5m", "tenant", "b"), 1.0, tol);
  EXPECT_DOUBLE_EQ(Value(prom_port, "kvstash:request_error_ratio:ratio_rate5m", "op", "LOOKUP"), 0.0);
  EXPECT_GT(Value(prom_port, "kvstash:request_duration_seconds:p99_rate5m", "op", "LOOKUP"), 0.0);
  EXPECT_DOUBLE_EQ(Value(prom_port, "kvstash:tier_occupancy:ratio", "tier", "T0"),
                   Value(prom_port, "kvstash_tier_bytes{tier=\"T0\"}") /
                       Value(prom_port, "kvstash_tier_budget_bytes{tier=\"T0\"}"));

  // Every rule evaluated without an error, and no alert is active.
  auto rules = json::parse(HttpGet(prom_port, "/api/v1/rules", "127.0.0.1", true).second);
  int evaluated = 0;
  for (const json& g : rules["data"]["groups"]) {
    for (const json& r : g["rules"]) {
      EXPECT_EQ(r.value("health", ""), "ok") << r.dump();
      ++evaluated;
    }
  }
  EXPECT_EQ(evaluated, 18);
  auto alerts = json::parse(HttpGet(prom_port, "/api/v1/alerts", "127.0.0.1", true).second);
  EXPECT_TRUE(alerts["data"]["alerts"].empty()) << alerts.dump();

  // Every Grafana panel query runs; the traffic panels have data.
  std::ifstream in(kDeploy + "/grafana/kvstash-dashboard.json");
  const json dash = json::parse(in);
  int queries = 0;
  for (const json& panel : dash["panels"]) {
    for (const json& t : panel["targets"]) {
      std::string q = t["expr"];
      q = std::regex_replace(q, std::regex("\\$__rate_interval"), "1m");
      q = std::regex_replace(q, std::regex("\\$instance"), ".+");
      const json result = Query(prom_port, q);
      const std::string title = panel["title"];
      if (title == "Token hit rate" || title == "Token hit rate per tenant" ||
          title == "Requests per second" || title == "Tier bytes" || title == "Open connections") {
        EXPECT_FALSE(result.empty()) << title << ": " << q;
      }
      ++queries;
    }
  }
  EXPECT_EQ(queries, 21);

  // One alert end to end: the node dies, up turns 0, KvstashDown is pending (for: 1m).
  s.Kill(SIGKILL);
  bool pending = false;
  for (int i = 0; i < 60 && !pending; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    auto al = json::parse(HttpGet(prom_port, "/api/v1/alerts", "127.0.0.1", true).second);
    for (const json& x : al["data"]["alerts"]) {
      pending |= x["labels"].value("alertname", "") == "KvstashDown" && x.value("state", "") == "pending";
    }
  }
  EXPECT_TRUE(pending) << "KvstashDown not pending 15 s after the server was killed";
}

}  // namespace
}  // namespace kvstash::server
