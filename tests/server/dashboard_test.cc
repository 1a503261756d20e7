// The /dashboard page in headless Chromium (Debian `chromium`): the page must load
// Chart.js from the server itself, start its time charts from the server's history
// (/v1/history, traffic from before the page opened), poll /v1/stats and render its six
// charts (per-tenant hit rate included, axes in fixed ranges) with the live numbers of
// traffic this test generated. Saves a screenshot as a test artifact
// (<build>/test-artifacts/dashboard.png).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "kvstash/client.h"
#include "tests/server/http_get.h"
#include "tests/server/raw_chain.h"
#include "tests/server/server_process.h"
#include "tests/server/test_payloads.h"
#include "tests/support/test_util.h"

namespace kvstash::server {
namespace {

using testing::Key;

std::string FindChromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

// Runs a command and returns its stdout.
std::string Capture(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

std::string ChromiumFlags() {
  // Root in CI containers needs --no-sandbox; virtual time lets the page's 1 s polls run
  // several times without the test sleeping that long.
  return " --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage"
         " --no-first-run --hide-scrollbars --virtual-time-budget=5000 --window-size=1400,1000";
}

TEST(DashboardTest, ChartsRenderLiveNumbersInHeadlessChromium) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (Debian package chromium)";
  testing::TempDir dir;
  testing::ServerProcess s;
  ASSERT_OK(s.Start(KVSTASH_SERVER_BIN, dir.path(),
                    {"--tenant", "a=pa", "--tenant", "b=pb", "--history-interval-ms", "100"}));
  ClientOptions o;
  o.servers = {s.address()};
  o.tenant = "a";
  o.credential = "pa";
  auto c = Client::Create(o).value();
  // Traffic with a known hit rate: 4 stored chunks of 16 tokens, each lookup asks for
  // 8 chunks, so tokens hit / tokens asked = 0.5 exactly.
  ASSERT_OK(testing::PutRawChain(*c, 4, 16));
  const std::vector<ChunkRef> chain = testing::RawChainRefs(8, 16);
  constexpr int kLookups = 25;
  for (int i = 0; i < kLookups; ++i) ASSERT_OK(c->Lookup(chain).status());
  ASSERT_OK(c->Get(Key(1), Key(2)).status());
  // Tenant b: 2 stored chunks, each lookup asks for those 2: hit rate 1. Server-wide:
  // (25 * 64 + 25 * 32) / (25 * 128 + 25 * 32) = 2400 / 4000 = 0.6.
  ClientOptions ob = o;
  ob.tenant = "b";
  ob.credential = "pb";
  auto cb = Client::Create(ob).value();
  ASSERT_OK(testing::PutRawChain(*cb, 2, 16));
  const std::vector<ChunkRef> chain_b = testing::RawChainRefs(2, 16);
  for (int i = 0; i < kLookups; ++i) ASSERT_OK(cb->Lookup(chain_b).status());
  // Samples every 100 ms: the history holds this traffic before the page opens.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const auto history = nlohmann::json::parse(testing::HttpGet(s.http_port(), "/v1/history").second);
  ASSERT_GE(history["samples"].size(), 3u) << history.dump();
  EXPECT_EQ(history["interval_ms"], 100);
  EXPECT_EQ(history["samples"].back()["tokens_requested"], 4000);
  EXPECT_EQ(history["samples"].back()["tenants"]["b"]["tokens_hit"], 800);

  const std::string url = "http://127.0.0.1:" + std::to_string(s.http_port()) + "/dashboard";
  const std::string dom = Capture(chromium + ChromiumFlags() + " --dump-dom '" + url + "' 2>/dev/null");
  const size_t a = dom.find("<pre id=\"status\">"), b = dom.find("</pre>", a);
  ASSERT_NE(a, std::string::npos) << dom.substr(0, 2000);
  ASSERT_NE(b, std::string::npos);
  const std::string text = dom.substr(a + 17, b - a - 17);
  auto status = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(status.is_discarded()) << "status: " << text;
  EXPECT_GE(status["updates"].get<int>(), 2) << text;
  EXPECT_TRUE(status["rendered"].get<bool>()) << text;
  EXPECT_GE(status["points"]["hitRate"].get<int>(), 2) << text;
  // History loaded first: samples with lookups before the page's own polls.
  EXPECT_GE(status["history_points"].get<int>(), 3) << text;
  EXPECT_GT(status["points"]["hitRate"].get<int>(), status["updates"].get<int>()) << text;
  EXPECT_GT(status["points"]["tenantHitRate"].get<int>(), 2 * status["updates"].get<int>()) << text;
  EXPECT_EQ(status["tenants"], nlohmann::json::array({"a", "b"})) << text;
  EXPECT_DOUBLE_EQ(status["tenant_hit_rates"]["a"].get<double>(), 0.5) << text;
  EXPECT_DOUBLE_EQ(status["tenant_hit_rates"]["b"].get<double>(), 1.0) << text;
  // Axes: rates 0..1, occupancy 0..100 %, latency on a log scale, bytes in units.
  EXPECT_EQ(status["axes"]["hitRate"]["min"], 0) << text;
  EXPECT_EQ(status["axes"]["hitRate"]["max"], 1) << text;
  EXPECT_EQ(status["axes"]["tenantHitRate"]["max"], 1) << text;
  EXPECT_EQ(status["axes"]["tiers"]["max"], 100) << text;
  EXPECT_EQ(status["axes"]["latency"]["type"], "logarithmic") << text;
  EXPECT_EQ(status["bytes_saved_tick"], "0 B") << text;
  EXPECT_GE(status["points"]["bytesSaved"].get<int>(), 2) << text;
  EXPECT_EQ(status["points"]["codecs"], 1) << text;     // raw
  EXPECT_EQ(status["points"]["tiers"], 1) << text;      // T0 (memory only)
  EXPECT_GE(status["points"]["latency"].get<int>(), 6) << text;  // p50 + p99 of >= 3 ops
  EXPECT_DOUBLE_EQ(status["hit_rate"].get<double>(), 0.6) << text;
  EXPECT_EQ(status["lookups"], 2 * kLookups) << text;
  // Request memory: 6 raw PUTs of 152 + 16 x 128 bytes each (bound payloads), no state.
  EXPECT_DOUBLE_EQ(status["put_memory"].get<double>(), 2200.0) << text;
  EXPECT_EQ(status["state_stored"], 0) << text;
  EXPECT_EQ(status["codecs"], nlohmann::json::array({"raw"}));
  EXPECT_EQ(status["tiers"], nlohmann::json::array({"T0"}));
  for (const char* op : {"LOOKUP", "PUT", "GET", "HELLO"}) {
    EXPECT_NE(std::find(status["latency_ops"].begin(), status["latency_ops"].end(), op),
              status["latency_ops"].end()) << op;
  }
  EXPECT_NE(dom.find("<span id=\"server-id\">127.0.0.1:"), std::string::npos);
  // The tiles show the same live hit rate.
  EXPECT_NE(dom.find("id=\"hit-rate\">0.600<"), std::string::npos);

  const std::string artifacts = std::string(KVSTASH_BUILD_DIR) + "/test-artifacts";
  std::filesystem::create_directories(artifacts);
  const std::string png = artifacts + "/dashboard.png";
  std::filesystem::remove(png);
  Capture(chromium + ChromiumFlags() + " --screenshot='" + png + "' '" + url + "' 2>/dev/null");
  ASSERT_TRUE(std::filesystem::exists(png));
  EXPECT_GT(std::filesystem::file_size(png), 20000u);  // charts drawn, not a blank page
  std::cerr << "dashboard screenshot: " << png << "\n";
}

}  // namespace
}  // namespace kvstash::server
