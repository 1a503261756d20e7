// The three command-line tools (cli/CMakeLists.txt): `kvstash --help` lists the product
// commands only and names kvstash-bench and kvstash-demo; `kvstash-bench --help` lists
// every benchmark; the old spellings `kvstash bench X` and `kvstash demo` run the new
// tools with the same arguments after one moved-line on stderr, with the new tool's
// exit status, and fail with exit 127 naming the expected path when the sibling is
// missing; the kvstash binary needs no libhiredis and holds no bench-driver or demo code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

const std::string kCli = KVSTASH_CLI_BIN;
const std::string kBench = KVSTASH_BENCH_BIN;
const std::string kDemo = KVSTASH_DEMO_BIN;

struct Output {
  int rc = 0;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class CliToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvstash-cli-tools-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Runs `cmd` through the shell; stdout and stderr apart.
  Output Sh(const std::string& cmd) const {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const int st = std::system((cmd + " > " + out.string() + " 2> " + err.string()).c_str());
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), Slurp(out), Slurp(err)};
  }
  fs::path dir_;
};

// The first words of the lines of the "Subcommands:" section of a --help text.
std::set<std::string> Subcommands(const std::string& help) {
  std::set<std::string> names;
  std::istringstream lines(help);
  bool in = false;
  for (std::string line; std::getline(lines, line);) {
    if (line == "Subcommands:") {
      in = true;
    } else if (in && line.starts_with("  ")) {
      std::istringstream words(line);
      std::string w;
      words >> w;
      names.insert(w);
    } else if (in && !line.empty()) {
      in = false;
    }
  }
  return names;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST_F(CliToolsTest, KvstashHelpListsOnlyTheProductCommandsAndNamesTheOtherTools) {
  const Output r = Sh(kCli + " --help");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Subcommands(r.out), (std::set<std::string>{"calibrate", "generate", "get", "inspect", "keys", "lookup",
                                                        "put", "stats"}))
      << r.out;
  EXPECT_NE(r.out.find("kvstash-bench --help"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kvstash-demo --help"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Exit status: 0 success"), std::string::npos) << r.out;
}

TEST_F(CliToolsTest, BenchHelpListsEveryBenchmarkAndDemoHelpItsFlags) {
  Output r = Sh(kBench + " --help");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Subcommands(r.out), (std::set<std::string>{"codec", "entropy", "link", "prefill", "server", "state",
                                                        "store", "trace"}))
      << r.out;
  r = Sh(kDemo + " --help");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(Subcommands(r.out).empty()) << r.out;
  EXPECT_NE(r.out.find("--start-server"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--log-level"), std::string::npos) << r.out;
  EXPECT_EQ(Sh(kBench).rc, 2);  // a subcommand is required
}

// A word that names no command is named back (exit 2), at the top and in a group; a
// missing command still gets CLI11's own message.
TEST_F(CliToolsTest, AnUnknownCommandIsNamed) {
  Output r = Sh(kCli + " nosuch --flag");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "kvstash: unknown command 'nosuch' (kvstash --help lists the commands)\n");
  r = Sh(kCli + " --log-level warn calibrate nosuch");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown command 'calibrate nosuch'"), std::string::npos) << r.err;
  r = Sh(kBench + " entropyy");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("kvstash-bench: unknown command 'entropyy'"), std::string::npos) << r.err;
  r = Sh(kCli + " put --bogus");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.find("unknown command"), std::string::npos) << r.err;
  r = Sh(kCli);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("subcommand is required"), std::string::npos) << r.err;
  // An option the tool lacks, before any command, is named rather than "A subcommand is
  // required".
  r = Sh(kCli + " --log-level warn --bogus=1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err,
            "kvstash: unknown option '--bogus' before the command (kvstash --help lists the options)\n");
}

// A usage error names the command it belongs to and where its options are listed.
TEST_F(CliToolsTest, AUsageErrorNamesItsCommand) {
  Output r = Sh(kCli + " --log-level warn put");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "kvstash put: --key is required\nRun 'kvstash put --help' for the options.\n");
  r = Sh(kCli + " keys --dtype u8");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("kvstash keys: --dtype: u8 not in {bf16,f16,f32,fp8_e4m3}\n", 0), 0u) << r.err;
  r = Sh(kCli + " calibrate");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("kvstash calibrate: ", 0), 0u) << r.err;
  // An error found before the first row prints no table header.
  r = Sh(kBench + " state --model " + (dir_ / "missing.bin").string());
  EXPECT_EQ(r.rc, 1);  // the run failed (a model file), as the tool's exit status says
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("missing.bin"), std::string::npos) << r.err;
  r = Sh(kBench + " codec --bogus-flag");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("kvstash-bench codec: The following argument", 0), 0u) << r.err;
}

// An empty workload is a usage error (exit 2) named before the demo loads a model or
// connects: here the server address is one where nothing listens.
TEST_F(CliToolsTest, DemoRefusesAnEmptyWorkloadAsAUsageError) {
  for (const char* flag : {"--documents", "--doc-tokens", "--requests-per-doc"}) {
    const Output r = Sh(kDemo + " --server 127.0.0.1:1 --credential x " + flag + " 0");
    EXPECT_EQ(r.rc, 2) << flag << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Connection refused"), std::string::npos) << r.err;
  }
}

TEST_F(CliToolsTest, OldSpellingsRunTheNewToolsAfterOneMovedLine) {
  const std::string moved_bench =
      "kvstash: 'kvstash bench store' moved to 'kvstash-bench store'; this alias goes away in the next release\n";
  // Exit 1 passes through (a scratch folder under a regular file), and so does the
  // tool's own output.
  std::ofstream(dir_ / "file") << "x";
  const std::string args = " store --dir " + (dir_ / "file/x").string() + " --chunks 1";
  const Output direct = Sh(kBench + args);
  ASSERT_EQ(direct.rc, 1) << direct.err;
  Output r = Sh(kCli + " bench" + args);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.out, direct.out);
  EXPECT_EQ(r.err, moved_bench + direct.err);
  // Exit 0, with an option of `kvstash` itself before the word.
  r = Sh(kCli + " --log-level warn bench store --help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, Sh(kBench + " store --help").out);
  EXPECT_EQ(r.err, moved_bench);
  // Exit 2: a usage error of the new tool.
  r = Sh(kCli + " bench no-such-bench");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_EQ(Count(r.err, "moved to"), 1u) << r.err;
  EXPECT_NE(r.err.find("'kvstash bench no-such-bench' moved to 'kvstash-bench no-such-bench'"), std::string::npos)
      << r.err;

  const std::string moved_demo =
      "kvstash: 'kvstash demo' moved to 'kvstash-demo'; this alias goes away in the next release\n";
  r = Sh(kCli + " demo --help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, Sh(kDemo + " --help").out);
  EXPECT_EQ(r.err, moved_demo);
  r = Sh(kCli + " demo --no-such-flag");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(r.err.starts_with(moved_demo)) << r.err;
  EXPECT_EQ(Count(r.err, "moved to"), 1u) << r.err;
}

TEST_F(CliToolsTest, AnOldSpellingFindsTheToolOnPathOrFailsNamingIt) {
  // A kvstash alone in a folder: the sibling is missing.
  const fs::path lone = dir_ / "kvstash";
  fs::copy_file(kCli, lone);
  Output r = Sh("PATH=" + (dir_ / "nowhere").string() + " " + lone.string() + " bench codec --help");
  EXPECT_EQ(r.rc, 127) << r.err;
  EXPECT_NE(r.err.find((dir_ / "kvstash-bench").string()), std::string::npos) << r.err;
  r = Sh("PATH=" + (dir_ / "nowhere").string() + " " + lone.string() + " demo");
  EXPECT_EQ(r.rc, 127) << r.err;
  EXPECT_NE(r.err.find((dir_ / "kvstash-demo").string()), std::string::npos) << r.err;
  // With the tools' folder on PATH it runs the one there.
  r = Sh("PATH=" + fs::path(kBench).parent_path().string() + " " + lone.string() + " bench codec --help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("--codec"), std::string::npos) << r.out;
}

TEST_F(CliToolsTest, KvstashCarriesNoHiredisBenchDriversOrDemo) {
  if (Sh("readelf --version").rc != 0 || Sh("nm --version").rc != 0) GTEST_SKIP() << "binutils missing";
  Output r = Sh("readelf -d " + kCli);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("hiredis"), std::string::npos) << r.out;
  // The check can see a library: kvstash-bench needs hiredis (the Redis store rows).
  EXPECT_NE(Sh("readelf -d " + kBench).out.find("hiredis"), std::string::npos);
  r = Sh("nm -C " + kCli);
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const std::string sym : {"kvstash::demo::", "RunLinkBench", "RunServerBench", "RunStoreTableBench",
                                "RunTraceBench", "RunEntropyBench", "RunPrefillBench", "RunStateBench",
                                "RunSpecStateBench", "redisConnect"}) {
    EXPECT_EQ(r.out.find(sym), std::string::npos) << sym;
  }
  EXPECT_NE(Sh("nm -C " + kBench).out.find("RunLinkBench"), std::string::npos);
  EXPECT_NE(Sh("nm -C " + kDemo).out.find("kvstash::demo::"), std::string::npos);
}

}  // namespace
