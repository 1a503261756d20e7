// `kvstash-bench link` scaled down (label integration): a 300-token prefix (two chunks,
// the second partial), raw codec, one fast rate (1 Gbit/s) and one slow (20 Mbit/s) at
// 20 ms RTT, through the real command, kvstash-server, namespaces and qdiscs. Asserts
// real values: every restore returned the stored payload bytes, the slow GET took at
// least the physical wire time (bytes x 8 / rate, less the tbf bucket, plus one RTT),
// the fast one less, and no kvstash-link namespace is left afterwards; also after
// SIGTERM in the middle of a run, and that --cleanup removes a stale one. Skips (with the
// reason) when not root or iproute2 is missing; checks that the command itself then
// exits 77 by dropping CAP_NET_ADMIN with setpriv.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

// kvstash-link-* namespaces now (the `ip netns list` names).
std::string LinkNamespaces() { return Shell("ip netns list 2>/dev/null | grep -o 'kvstash-link-[0-9a-z-]*'"); }

class LinkBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "kvstash-bench link needs root (CAP_NET_ADMIN): skipped";
    if (std::system("ip -V >/dev/null 2>&1") != 0) GTEST_SKIP() << "iproute2 (`ip`) missing: skipped";
    model_ = kvstash::testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!fs::exists(model_)) GTEST_SKIP() << model_ << " absent: run scripts/setup.sh";
    dir_ = fs::temp_directory_path() / ("kvstash-link-test-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string Flags() const {
    return " link --model " + model_ + " --server-bin " + KVSTASH_SERVER_BIN +
           " --codec raw --tokens 300 --reps 1 --recompute-reps 1 --rtt-ms 20";
  }
  std::string model_;
  fs::path dir_;
};

TEST_F(LinkBenchTest, RestoresTheStoredBytesWithinThePhysicalBound) {
  const std::string before = LinkNamespaces();
  const std::string json = (dir_ / "link.json").string();
  const std::string out = (dir_ / "out.txt").string();
  const int rc = std::system((std::string(KVSTASH_BENCH_BIN) + Flags() + " --rate 1G --rate 20M --json " + json +
                              " > " + out + " 2>&1").c_str());
  const std::string log = Shell("cat " + out);
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << log;
  EXPECT_EQ(LinkNamespaces(), before) << "namespaces left behind";

  std::ifstream f(json);
  ASSERT_TRUE(f.good()) << log;
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump(1);
  EXPECT_EQ(j["setup"]["prefix_tokens"], 300);
  EXPECT_GT(j["setup"]["recompute_ms"].get<double>(), 0);
  for (const auto& r : j["rows"]) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["codec"], "raw");
    EXPECT_EQ(r["chunks"], 2);  // 256 + a partial chunk of 44 tokens
    // raw: 30 layers x 3 KV heads x 64 dims x K,V x 2 bytes = 23,040 bytes per token.
    EXPECT_EQ(r["raw_bytes"], 300u * 23040u);
    EXPECT_GE(r["stored_bytes"].get<uint64_t>(), r["raw_bytes"].get<uint64_t>());  // + headers
    EXPECT_EQ(r["restored_bytes"], r["stored_bytes"]);
    EXPECT_TRUE(r["verified"].get<bool>());
    EXPECT_GT(r["decode_ms"].get<double>(), 0);
    EXPECT_EQ(r["predictor_ms"].get<double>(), 0);
    // A LOOKUP is one round trip over the 20 ms link.
    EXPECT_GE(r["lookup_ms"].get<double>(), 20 * 0.95);
    const double bytes = r["stored_bytes"].get<double>();
    const double rate = r["rate_bits_per_s"].get<double>();
    const double floor_ms = (bytes - r["tbf_burst_bytes"].get<double>()) * 8 / rate * 1000;
    EXPECT_GE(r["transfer_ms"].get<double>(), floor_ms);
    EXPECT_GE(r["get_ms"].get<double>(), floor_ms + 20 * 0.95);  // + the request's round trip
    EXPECT_NEAR(r["restore_ms"].get<double>(),
                r["lookup_ms"].get<double>() + r["get_ms"].get<double>() + r["decode_ms"].get<double>(), 1e-6);
  }
  const auto& fast = j["rows"][0];
  const auto& slow = j["rows"][1];
  EXPECT_EQ(fast["rate_bits_per_s"], 1e9);
  EXPECT_EQ(slow["rate_bits_per_s"], 20e6);
  // 6.9 MB at 20 Mbit/s is >= 2.7 s; at 1 Gbit/s well under a second.
  EXPECT_GT(slow["get_ms"].get<double>(), 2700);
  EXPECT_LT(fast["get_ms"].get<double>(), slow["get_ms"].get<double>() / 4);
  ASSERT_EQ(j["crossover"].size(), 1u);
}

TEST_F(LinkBenchTest, SigtermMidRunRemovesTheNamespaces) {
  const std::string out = (dir_ / "out.txt").string();
  std::vector<std::string> argv = {KVSTASH_BENCH_BIN};
  std::string flags = Flags() + " --rate 2M";  // ~28 s of wire time: still running when killed
  for (size_t p = 0, q; p < flags.size(); p = q + 1) {
    q = flags.find(' ', p);
    if (q == std::string::npos) q = flags.size();
    if (q > p) argv.push_back(flags.substr(p, q - p));
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  const std::string mine = "kvstash-link-" + std::to_string(pid) + "-srv";
  // Wait until the link carries GETs (the server's namespace exists and the log shows it).
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    up = LinkNamespaces().find(mine) != std::string::npos && Shell("cat " + out).find("link: ") != std::string::npos;
  }
  ASSERT_TRUE(up) << Shell("cat " + out);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // inside the 2 Mbit/s GETs
  kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM) << Shell("cat " + out);
  EXPECT_EQ(LinkNamespaces().find("kvstash-link-" + std::to_string(pid) + "-"), std::string::npos);
}

TEST_F(LinkBenchTest, CleanupRemovesAStaleNamespace) {
  // A pid above pid_max: never a live process, so the namespace is stale.
  const std::string stale = "kvstash-link-999999999-srv";
  ASSERT_EQ(std::system(("ip netns add " + stale).c_str()), 0);
  const std::string out = Shell(std::string(KVSTASH_BENCH_BIN) + " link --cleanup 2>&1");
  EXPECT_NE(out.find(stale), std::string::npos) << out;
  EXPECT_EQ(LinkNamespaces().find(stale), std::string::npos) << out;
}

TEST_F(LinkBenchTest, WithoutNetAdminItSkipsWithExitCode77) {
  if (std::system("setpriv --help >/dev/null 2>&1") != 0) GTEST_SKIP() << "setpriv (util-linux) missing";
  const std::string out = (dir_ / "out.txt").string();
  const int rc = std::system(("setpriv --bounding-set -net_admin --inh-caps -net_admin " +
                              std::string(KVSTASH_BENCH_BIN) + Flags() + " --rate 1G > " + out + " 2>&1").c_str());
  const std::string log = Shell("cat " + out);
  ASSERT_TRUE(WIFEXITED(rc)) << log;
  EXPECT_EQ(WEXITSTATUS(rc), 77) << log;
  EXPECT_NE(log.find("skipped: needs CAP_NET_ADMIN"), std::string::npos) << log;
}

}  // namespace
