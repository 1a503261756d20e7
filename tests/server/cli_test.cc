// The command-line tools against a real kvstash-server: `kvstash put/get/lookup`
// (request memory printed, inputs checked before anything is read or sent, exit
// codes), `kvstash-server` flags (--help defaults, --disk-budget, exit 2 on usage
// errors), its HTTP port (HEAD Content-Length, 400 for malformed requests) and its
// start-up with a missing chart_js or an unreachable Redis T2 (degraded, not dead).
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <csignal>
#include <thread>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/file_bytes.h"
#include "kvstash/payload_format.h"
#include "tests/server/server_process.h"
#include "tests/server/test_payloads.h"
#include "tests/support/test_util.h"

namespace kvstash::server {
namespace {

using testing::RawPayload;
using testing::ServerProcess;
using testing::TempDir;

// Runs a shell command; returns its exit status and stdout + stderr.
std::pair<int, std::string> Sh(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// One raw HTTP exchange (the request as given); returns everything the server sent.
std::string HttpRaw(int port, const std::string& request) {
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket s(ioc);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  asio::write(s, asio::buffer(request));
  std::string all;
  boost::system::error_code ec;
  asio::read(s, asio::dynamic_buffer(all), ec);
  return all;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

const std::string kCli = KVSTASH_CLI_BIN;
const std::string kBench = KVSTASH_BENCH_BIN;
const std::string kServer = KVSTASH_SERVER_BIN;
const std::string kKey1 = "000102030405060708090a0b0c0d0e0f";
const std::string kKey2 = "100102030405060708090a0b0c0d0e0f";

// The stored key written as 32 hex digits.
StoredKey KeyOfHex(const std::string& hex) {
  StoredKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return k;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(server_.Start(kServer, dir_.path(),
                            {"--tenant", "a=pa", "--max-frame-bytes", "4096"}));
    flags_ = " --server " + server_.address() + " --tenant a --credential pa ";
  }
  std::string P(const std::string& name) const { return dir_.path() + "/" + name; }

  TempDir dir_;
  ServerProcess server_;
  std::string flags_;
};

TEST_F(CliTest, PutAndGetPrintRequestMemory) {
  // Raw bf16 chunk of 16 tokens x 128 bytes + a 130-byte hybrid state record.
  WriteFile(P("c1"), RawPayload(16, 1));
  RecurrentState st;
  st.boundary_tokens = 16;
  st.tensors.push_back({"layers.0.state", DType::kF32, {2, 2}, std::vector<uint8_t>(16, 7)});
  WriteFile(P("s1"), EncodeStateRecord(st, Digest256{}).value());
  auto [rc, out] = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("c1") +
                      " --state " + P("s1"));
  ASSERT_EQ(rc, 0) << out;
  // The file's unbound payload (136-byte header) is stored bound to --key (152 bytes).
  EXPECT_NE(out.find("request memory 2330 bytes = payload 2200 (coded 152 + 16 uncompressed "
                     "positions in 2048 bytes) + state 130"),
            std::string::npos)
      << out;
  std::tie(rc, out) = Sh(kCli + " get" + flags_ + "--key " + kKey1 + " --out " + P("o1") +
                         " --state-out " + P("os1"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("request memory 2330 bytes"), std::string::npos) << out;
  EXPECT_EQ(std::filesystem::file_size(P("os1")), 130u);
  // `kvstash stats` shows the tenant's memory counters.
  std::tie(rc, out) = Sh(kCli + " stats" + flags_);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"state_bytes\": 130"), std::string::npos) << out;
}

// Several --server: one JSON document keyed by host:port (before, the documents were
// printed one after another, which no JSON parser reads as one).
TEST_F(CliTest, StatsOfSeveralServersIsOneJsonDocument) {
  TempDir dir2;
  ServerProcess second;
  ASSERT_OK(second.Start(kServer, dir2.path(), {"--tenant", "a=pa", "--server-id", "second"}));
  const std::string both = " --server " + server_.address() + " --server " + second.address() +
                           " --tenant a --credential pa";
  auto [rc, out] = Sh(kCli + " stats" + both);
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json doc = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << out;
  ASSERT_EQ(doc.size(), 2u) << out;
  EXPECT_LT(out.find("\"" + server_.address() + "\""), out.find("\"" + second.address() + "\""))
      << out;  // in --server order
  EXPECT_EQ(doc[second.address()]["server_id"], "second") << out;
  EXPECT_TRUE(doc[server_.address()].contains("server_id")) << out;
  // One server: its document itself.
  std::tie(rc, out) = Sh(kCli + " stats" + flags_);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(nlohmann::json::parse(out, nullptr, false).contains("server_id")) << out;
  // A server that fails is left out, named on stderr, exit 1.
  second.Kill(SIGKILL);
  std::tie(rc, out) = Sh(kCli + " stats" + both);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("kvstash stats: " + second.address() + ": Unavailable"), std::string::npos) << out;
  std::tie(rc, out) = Sh("(" + kCli + " stats" + both + " 2>/dev/null)");
  EXPECT_EQ(rc, 1) << out;
  const nlohmann::json partial = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(partial.is_object()) << out;
  EXPECT_EQ(partial.size(), 1u) << out;
  EXPECT_TRUE(partial.contains(server_.address())) << out;
}

TEST_F(CliTest, InputsAreCheckedAndUsageErrorsExit2) {
  WriteFile(P("c1"), RawPayload(16, 1));
  // Larger than the server's max_frame_bytes (4096): refused before it is read.
  WriteFile(P("big"), RawPayload(64, 1));  // 136 + 8192 bytes
  auto [rc, out] = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("big"));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("exceed the server's max_frame_bytes 4096 (not read, not sent)"),
            std::string::npos) << out;
  // --codec needs --raw-kv (CLI11's error exits 2 like ours).
  std::tie(rc, out) = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("c1") +
                         " --codec 2");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--raw-kv"), std::string::npos) << out;
  std::tie(rc, out) = Sh(kCli + " put" + flags_ + "--no-such-flag");
  EXPECT_EQ(rc, 2) << out;
  // A chunk without a state record: --state-out writes nothing and exits 3.
  std::tie(rc, out) = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("c1"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " get" + flags_ + "--key " + kKey1 + " --out " + P("o") +
                         " --state-out " + P("os"));
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("no recurrent-state record"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(P("os")));
  EXPECT_FALSE(std::filesystem::exists(P("o")));
  // lookup: empty keys and zero chunk tokens are refused; a good list works.
  for (const std::string& keys : {kKey1 + ",,", kKey1 + ",", "," + kKey1, kKey1 + ",," + kKey2}) {
    std::tie(rc, out) = Sh(kCli + " lookup" + flags_ + "--keys '" + keys + "'");
    EXPECT_EQ(rc, 2) << keys << ": " << out;
  }
  std::tie(rc, out) = Sh(kCli + " lookup" + flags_ + "--keys " + kKey1 + " --chunk-tokens 0");
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = Sh(kCli + " lookup" + flags_ + "--keys '" + kKey1 + ", " + kKey2 + "'");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"matched_chunks\":1"), std::string::npos) << out;
  // The exit codes are documented in --help.
  std::tie(rc, out) = Sh(kCli + " --help");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("Exit status: 0 success"), std::string::npos) << out;
}

// matched_tokens and the tenant's tokens_hit come from the stored chunks' token
// counts, not from the client's --chunk-tokens: a 10-token prefix in chunks of 4
// (4 + 4 + a partial 2) matches 10 tokens, not 12.
TEST_F(CliTest, LookupCountsTheStoredTokensOfAPartialLastChunk) {
  const std::string k3 = "200102030405060708090a0b0c0d0e0f";
  WriteFile(P("c1"), RawPayload(4, 1));
  WriteFile(P("c2"), RawPayload(4, 2));
  WriteFile(P("c3"), RawPayload(2, 3));
  auto [rc, out] = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("c1"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " put" + flags_ + "--key " + kKey2 + " --parent " + kKey1 +
                         " --payload " + P("c2"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " put" + flags_ + "--key " + k3 + " --parent " + kKey2 +
                         " --payload " + P("c3"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " lookup" + flags_ + "--keys " + kKey1 + "," + kKey2 + "," + k3 +
                         " --chunk-tokens 4");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"matched_chunks\":3"), std::string::npos) << out;
  EXPECT_NE(out.find("\"matched_tokens\":10"), std::string::npos) << out;
  std::tie(rc, out) = Sh(kCli + " stats" + flags_);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"tokens_hit\": 10"), std::string::npos) << out;
  EXPECT_NE(out.find("\"tokens_requested\": 12"), std::string::npos) << out;  // as asked
  // A client claiming 1 token per chunk: the reply still says the stored 10, but the
  // hit counters add at most the 3 tokens asked (13 of 15; before: 20 of 15, a token
  // hit rate of 1.33).
  std::tie(rc, out) = Sh(kCli + " lookup" + flags_ + "--keys " + kKey1 + "," + kKey2 + "," + k3 +
                         " --chunk-tokens 1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"matched_tokens\":10"), std::string::npos) << out;
  std::tie(rc, out) = Sh(kCli + " stats" + flags_);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"tokens_hit\": 13"), std::string::npos) << out;
  EXPECT_NE(out.find("\"tokens_requested\": 15"), std::string::npos) << out;
}

// put binds an unbound payload file to --key; a file bound to another key is refused
// before anything is sent (exit 2), and the stored payload names its key.
TEST_F(CliTest, PutBindsThePayloadToItsKey) {
  WriteFile(P("c1"), RawPayload(4, 1));
  WriteFile(P("bound2"), testing::Bound(RawPayload(4, 1), KeyOfHex(kKey2)));
  auto [rc, out] = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("bound2"));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("payload is bound to key " + kKey2), std::string::npos) << out;
  std::tie(rc, out) = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("c1"));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " get" + flags_ + "--key " + kKey1 + " --out " + P("o1"));
  ASSERT_EQ(rc, 0) << out;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> got, ReadFileBytes(P("o1")));
  EXPECT_EQ(got, testing::Bound(RawPayload(4, 1), KeyOfHex(kKey1)));
  std::tie(rc, out) = Sh(kCli + " inspect " + P("o1"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"chunk_key\": \"" + kKey1 + "\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"format_version\": 2"), std::string::npos) << out;
}

TEST_F(CliTest, GetWritesBothFilesOrNeither) {
  RecurrentState st;
  st.boundary_tokens = 16;
  st.tensors.push_back({"layers.0.state", DType::kF32, {2, 2}, std::vector<uint8_t>(16, 7)});
  WriteFile(P("c1"), RawPayload(16, 1));
  WriteFile(P("s1"), EncodeStateRecord(st, Digest256{}).value());
  auto [rc, out] = Sh(kCli + " put" + flags_ + "--key " + kKey1 + " --payload " + P("c1") +
                      " --state " + P("s1"));
  ASSERT_EQ(rc, 0) << out;
  // One file for both: a usage error, nothing fetched or written.
  std::tie(rc, out) = Sh(kCli + " get" + flags_ + "--key " + kKey1 + " --out " + P("same") +
                         " --state-out " + dir_.path() + "/./same");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("name the same file"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(P("same")));
  // The state file cannot be written: the payload file is not left behind either.
  std::tie(rc, out) = Sh(kCli + " get" + flags_ + "--key " + kKey1 + " --out " + P("o1") +
                         " --state-out " + P("no-such-dir/s"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("(no file written)"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(P("o1")));
  EXPECT_FALSE(std::filesystem::exists(P("o1.part")));
}

TEST_F(CliTest, UnusableOutputFoldersAreErrorsNotCrashes) {
  // A path under a regular file cannot be created (ENOTDIR): exit 1 with the reason.
  WriteFile(P("file"), {1});
  auto [rc, out] = Sh(kBench + " store --dir " + P("file/x") + " --chunks 1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("cannot create " + P("file/x")), std::string::npos) << out;
  // calibrate dckv: bad values are usage errors before the model is even loaded.
  for (const std::string bad : {"--rate 0", "--rate 1", "--rate nan", "--rate inf", "--rate 8x",
                                 "--group-layers 0", "--cal-tokens 0", "--doc-tokens 0",
                                 "--threshold -1"}) {
    std::tie(rc, out) = Sh(kCli + " calibrate dckv --model /nonexistent " + bad);
    EXPECT_EQ(rc, 2) << bad << ": " << out;
  }
  // Output-weights files: a missing file, a folder or "" is a usage error; both a file
  // and --sensitivity-docs is a usage error; a malformed file fails before the model
  // is loaded, naming the file.
  std::filesystem::create_directories(P("adir"));
  for (const std::string& bad : {" --sensitivity-file " + P("none.json"), " --sensitivity-file " + P("adir"),
                                 std::string(" --sensitivity-file ''"), std::string(" --sensitivity-floor nan"),
                                 std::string(" --sensitivity-floor 0")}) {
    std::tie(rc, out) = Sh(kCli + " calibrate dckv --model /nonexistent" + bad);
    EXPECT_EQ(rc, 2) << bad << ": " << out;
  }
  WriteFile(P("ok.json"), {'{', '}'});
  std::tie(rc, out) = Sh(kCli + " calibrate dckv --model /nonexistent --sensitivity-docs 1 --sensitivity-file " + P("ok.json"));
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = Sh(kBench + " codec --codec dckv --model /nonexistent --rate 0");
  EXPECT_EQ(rc, 2) << out;
  // calibrate dckv --trained: --base is needed, the options the base fixes are refused,
  // missing files are usage errors; a malformed trained file fails (exit 1, naming the
  // problem) before the model is loaded.
  WriteFile(P("t.safetensors"), {1, 2, 3});
  WriteFile(P("base.kvda"), {4, 5, 6});
  const std::string t = " --trained " + P("t.safetensors"), b = " --base " + P("base.kvda");
  for (const std::string& bad :
       {t, b, t + b + " --rate 8", t + b + " --group-layers 3", t + b + " --raw-head 2",
        " --trained " + P("none") + b, t + " --base " + P("none")}) {
    std::tie(rc, out) = Sh(kCli + " calibrate dckv --model /nonexistent --out " + P("imp") + bad);
    EXPECT_EQ(rc, 2) << bad << ": " << out;
  }
  std::tie(rc, out) = Sh(kCli + " calibrate dckv --model /nonexistent --out " + P("imp") + t + b);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("safetensors: file shorter than its 8-byte header length"), std::string::npos) << out;
  // Every bench's --json FILE is checked before the run: a missing folder, a folder as
  // FILE or an unwritable folder is a usage error naming it (before, bench store,
  // trace, link and prefill ran and then exited 0 without writing it).
  for (const std::string bench : {"codec --codec dckv --model /nonexistent", "entropy", "state", "server",
                                   "store --chunks 1", "trace", "link", "prefill"}) {
    std::tie(rc, out) = Sh(kBench + " " + bench + " --json " + P("nodir/b.json"));
    EXPECT_EQ(rc, 2) << bench << ": " << out;
    EXPECT_NE(out.find("cannot write " + P("nodir/b.json")), std::string::npos) << bench << ": " << out;
    std::tie(rc, out) = Sh(kBench + " " + bench + " --json " + P("adir"));
    EXPECT_EQ(rc, 2) << bench << ": " << out;
    EXPECT_NE(out.find("is a folder"), std::string::npos) << bench << ": " << out;
  }
  // A dangling link, and a "folder" that is a file: refused up front too.
  std::filesystem::create_symlink(P("nowhere/x.json"), P("dangling.json"));
  std::tie(rc, out) = Sh(kBench + " store --chunks 1 --json " + P("dangling.json"));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("dangling symbolic link"), std::string::npos) << out;
  std::tie(rc, out) = Sh(kBench + " store --chunks 1 --json " + P("file/x.json"));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(P("file") + " is not a folder"), std::string::npos) << out;
  std::filesystem::create_directories(P("ro"));
  std::filesystem::permissions(P("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  if (::access(P("ro").c_str(), W_OK) != 0) {  // root writes anywhere: then nothing to check
    std::tie(rc, out) = Sh(kBench + " store --chunks 1 --json " + P("ro/b.json"));
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("cannot write " + P("ro/b.json")), std::string::npos) << out;
  }
  // A writable path: bench store writes the rows it printed.
  std::tie(rc, out) = Sh(kBench + " store --chunks 4 --json " + P("rows.json"));
  ASSERT_EQ(rc, 0) << out;
  const auto rows = nlohmann::json::parse(std::ifstream(P("rows.json")));
  ASSERT_TRUE(rows.is_array());
  ASSERT_FALSE(rows.empty());
  EXPECT_NE(out.find(rows[0]["name"].get<std::string>()), std::string::npos) << out;
  for (const std::string& bad : {std::string("{\"weight\": [1, 2]}"), std::string("not json"),
                                 std::string("{\"n_layers\": 1, \"n_kv_heads\": 1, \"head_dim\": 1, \"weight\": [1, 0]}"),
                                 std::string("{\"n_layers\": 1, \"n_kv_heads\": 1, \"head_dim\": 1, \"weight\": [1, 5e-324]}"),
                                 std::string("{\"n_layers\": 4294967297, \"n_kv_heads\": 1, \"head_dim\": 1, \"weight\": [1, 1]}")}) {
    WriteFile(P("w.json"), std::vector<uint8_t>(bad.begin(), bad.end()));
    std::tie(rc, out) = Sh(kBench + " codec --codec dckv --model /nonexistent --dckv-sensitivity-file " + P("w.json"));
    EXPECT_EQ(rc, 1) << bad << ": " << out;
    EXPECT_NE(out.find(P("w.json")), std::string::npos) << bad << ": " << out;
  }
  // An artifact to score that does not exist fails before the model is loaded.
  std::tie(rc, out) =
      Sh(kBench + " codec --codec dckv --model /nonexistent --dckv-artifact " + P("none.kvda"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find(P("none.kvda")), std::string::npos) << out;
  // A bad output folder fails first, as a usage error, before the model is loaded and
  // calibrated (P("file") is a regular file).
  for (const char* codec : {"dckv", "spec"}) {
    std::tie(rc, out) = Sh(kCli + " calibrate " + codec + " --model /nonexistent --out " + P("file/x"));
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("--out: " + P("file") + " is not a folder"), std::string::npos) << out;
  }
}

TEST_F(CliTest, HttpHeadHasTheContentLengthAndMalformedRequestsGet400) {
  const std::string head =
      HttpRaw(server_.http_port(), "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.substr(0, head.find("\r\n")), "HTTP/1.1 200 OK") << head;
  EXPECT_NE(head.find("Content-Length: 3\r\n"), std::string::npos) << head;  // "ok\n"
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");                     // no body
  const std::string bad = HttpRaw(server_.http_port(), "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(bad.substr(0, bad.find("\r\n")), "HTTP/1.1 400 Bad Request") << bad;
}

TEST(ServerCliTest, HelpShowsDefaultsAndUsageErrorsExit2) {
  auto [rc, out] = Sh(kServer + " --help");
  EXPECT_EQ(rc, 0);
  for (const char* want : {"--listen", "[default: 127.0.0.1]", "--http-listen", "[default: 7470]",
                           "--disk-budget", "[default: 68719476736]", "[default: 268435456]"}) {
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  }
  std::tie(rc, out) = Sh(kServer + " --no-such-flag");
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = Sh(kServer + " --tenant a=b --disk-budget 12X");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--disk-budget"), std::string::npos) << out;
  std::tie(rc, out) = Sh(kServer + " --tenant a=b --http-listen not-an-ip");
  EXPECT_EQ(rc, 2) << out;
}

// HELLO carries server_id with a u8 length: an id over 255 bytes is a configuration
// error at start (exit 2), from the flag and from the JSON config; so is an empty one
// given on the command line; 255 bytes work.
TEST(ServerCliTest, AServerIdOver255BytesIsRefusedAtStart) {
  TempDir dir;
  const std::string long_id(256, 'n');
  auto [rc, out] = Sh("timeout -s TERM 5 " + kServer + " --tenant a=b --port 0 --http-port 0" +
                      " --server-id " + long_id);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("server_id is 256 bytes; at most 255"), std::string::npos) << out;
  const std::string config = dir.path() + "/c.json";
  std::ofstream(config) << "{\"server_id\": \"" << std::string(300, 'x')
                        << "\", \"tenants\": [{\"name\": \"a\", \"credential\": \"b\"}]}";
  std::tie(rc, out) = Sh("timeout -s TERM 5 " + kServer + " --config " + config +
                         " --port 0 --http-port 0");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("server_id is 300 bytes; at most 255"), std::string::npos) << out;
  std::tie(rc, out) = Sh("timeout -s TERM 5 " + kServer + " --tenant a=b --port 0 --http-port 0 --server-id ''");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("must not be empty"), std::string::npos) << out;
  // 255 bytes: every client call works and the id reaches the client's STATS.
  ServerProcess s;
  const std::string id(255, 'i');
  ASSERT_OK(s.Start(kServer, dir.path(), {"--tenant", "a=pa", "--server-id", id}));
  std::tie(rc, out) = Sh(kCli + " stats --server " + s.address() + " --tenant a --credential pa");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(id), std::string::npos) << out;
}

// The client commands speak TLS to a server whose protocol port does: --tls-ca (the
// self-signed certificate is its own CA) verifies it; plain TCP, or --tls against the
// system's CAs, fails (before, the CLI had no TLS flags and could not reach such a
// server); --tls-insecure encrypts without verifying.
TEST(ServerCliTest, ClientCommandsSpeakTls) {
  TempDir dir;
  const std::string cert = dir.path() + "/cert.pem", key = dir.path() + "/key.pem";
  const std::string make = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                           " -days 1 -subj /CN=kvstash-test -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(make.c_str()), 0) << "openssl CLI (Debian package openssl) is needed";
  ServerProcess s;
  ASSERT_OK(s.Start(kServer, dir.path(), {"--tenant", "a=pa", "--tls-cert", cert, "--tls-key", key}));
  const std::string flags = " --server " + s.address() + " --tenant a --credential pa --deadline-ms 3000";
  auto [rc, out] = Sh(kCli + " stats" + flags + " --tls-ca " + cert);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"tenant\": \"a\""), std::string::npos) << out;
  std::tie(rc, out) = Sh(kCli + " stats" + flags + " --tls-insecure");
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " stats" + flags);
  EXPECT_NE(rc, 0) << out;  // plain TCP to a TLS port
  std::tie(rc, out) = Sh(kCli + " stats" + flags + " --tls");
  EXPECT_NE(rc, 0) << out;  // the self-signed certificate is not in the system's CAs
  std::tie(rc, out) = Sh(kCli + " stats" + flags + " --tls-ca " + dir.path() + "/none.pem");
  EXPECT_EQ(rc, 2) << out;  // usage error: no such file
  std::tie(rc, out) = Sh(kCli + " stats" + flags + " --tls-ca " + cert + " --tls-insecure");
  EXPECT_EQ(rc, 2) << out;  // usage error: verify against a CA, or not at all
}

// Signals keep arriving after the first (systemd sends SIGTERM and then SIGHUP): the
// server drains once and exits 0, also when a signal lands while the store closes
// after the drain (before: the default action, restored when the signal set was
// destroyed, killed it there: exit 129 / 143).
TEST(ServerCliTest, SignalsDuringTheDrainAndTheStoreCloseDoNotKillTheServer) {
  TempDir dir;
  ServerProcess s;
  ASSERT_OK(s.Start(kServer, dir.path(), {"--tenant", "a=pa", "--data-dir", dir.path() + "/data"}));
  const std::string flags = " --server " + s.address() + " --tenant a --credential pa";
  WriteFile(dir.path() + "/c1", RawPayload(64, 1));
  auto [rc, out] = Sh(kCli + " put" + flags + " --key " + kKey1 + " --payload " + dir.path() + "/c1");
  ASSERT_EQ(rc, 0) << out;
  const pid_t pid = s.pid();
  ASSERT_GT(pid, 0);
  kill(pid, SIGTERM);
  // SIGHUP / SIGTERM every millisecond until the process is gone (no waitpid here: the
  // pid stays a zombie, so kill() keeps succeeding until ServerProcess reaps it).
  for (int i = 0; i < 5000; ++i) {
    kill(pid, i % 2 ? SIGTERM : SIGHUP);
    if (std::filesystem::exists("/proc/" + std::to_string(pid) + "/status")) {
      std::ifstream st("/proc/" + std::to_string(pid) + "/status");
      std::string all((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
      if (all.find("State:\tZ") != std::string::npos) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(s.WaitExit(), 0);
  // The acknowledged PUT is there after a restart.
  ServerProcess again;
  ASSERT_OK(again.Start(kServer, dir.path(), {"--tenant", "a=pa", "--data-dir", dir.path() + "/data"}));
  std::tie(rc, out) = Sh(kCli + " get --server " + again.address() + " --tenant a --credential pa --key " + kKey1 +
                         " --out " + dir.path() + "/back");
  EXPECT_EQ(rc, 0) << out;
}

// Thread counts are bounded at start (1..1024 each): before, --io-threads 40000 aborted
// the process (exit 134) when the OS refused a thread.
TEST(ServerCliTest, ThreadCountsOutsideTheirRangeAreRefusedAtStart) {
  for (const std::string flags : {"--io-threads 40000", "--worker-threads 40000", "--io-threads 0",
                                   "--worker-threads 1025"}) {
    auto [rc, out] = Sh("timeout -s TERM 5 " + kServer + " --tenant a=b --port 0 --http-port 0 " + flags);
    EXPECT_EQ(rc, 2) << flags << ": " << out;
    EXPECT_NE(out.find("io_threads and worker_threads must be 1..1024"), std::string::npos) << flags << ": " << out;
  }
}

// Two --tenant flags for one name are a usage error (before: the last one silently
// won and the first credential was refused); a --tenant still replaces the config
// file's tenant of that name.
TEST(ServerCliTest, ATenantGivenTwiceIsRefusedAndAFlagOverridesTheConfig) {
  TempDir dir;
  auto [rc, out] = Sh("timeout -s TERM 5 " + kServer + " --tenant a=first --tenant a=second --tenant b=bb" +
                      " --port 0 --http-port 0 --data-dir " + dir.path() + "/d1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--tenant a is given twice"), std::string::npos) << out;
  const std::string config = dir.path() + "/c.json";
  std::ofstream(config) << "{\"tenants\": [{\"name\": \"a\", \"credential\": \"old\"}]}";
  ServerProcess s;
  ASSERT_OK(s.Start(kServer, dir.path(), {"--config", config, "--tenant", "a=new"}));
  std::tie(rc, out) = Sh(kCli + " stats --server " + s.address() + " --tenant a --credential new");
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " stats --server " + s.address() + " --tenant a --credential old");
  EXPECT_NE(rc, 0) << out;
}

// limits.hello_timeout_ms has its flag like the other limits: a connection that sends
// nothing is closed once it passes.
TEST(ServerCliTest, HelloTimeoutFlagClosesASilentConnection) {
  auto [rc, out] = Sh(kServer + " --help");
  EXPECT_NE(out.find("--hello-timeout-ms"), std::string::npos) << out;
  TempDir dir;
  ServerProcess s;
  ASSERT_OK(s.Start(kServer, dir.path(), {"--tenant", "a=pa", "--hello-timeout-ms", "300"}));
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket sock(ioc);
  sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(s.port())});
  const auto t0 = std::chrono::steady_clock::now();
  std::string all;
  boost::system::error_code ec;
  asio::read(sock, asio::dynamic_buffer(all), ec);  // until the server closes
  const double s_waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(ec == asio::error::eof || ec == asio::error::connection_reset) << ec.message();
  EXPECT_GE(s_waited, 0.25);
  EXPECT_LT(s_waited, 3.0);  // the default is 5 s
}

TEST(ServerCliTest, AnUnwritableReadyFileFailsTheStart) {
  TempDir dir;
  auto [rc, out] = Sh(kServer + " --tenant a=b --port 0 --http-port 0 --data-dir " + dir.path() +
                      "/db --ready-file " + dir.path() + "/no-such-dir/ready.json");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("ready file"), std::string::npos) << out;
}

TEST(ServerCliTest, DiskBudgetFlagSetsTheT1Budget) {
  TempDir dir;
  ServerProcess s;
  ASSERT_OK(s.Start(kServer, dir.path(),
                    {"--tenant", "a=pa", "--data-dir", dir.path() + "/db", "--disk-budget", "3G",
                     "--memory-budget", "64MiB"}));
  const std::string all = HttpRaw(s.http_port(),
                                  "GET /v1/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  auto j = nlohmann::json::parse(all.substr(all.find("\r\n\r\n") + 4));
  EXPECT_EQ(j["tiers"][0]["budget_bytes"], 64ull << 20);
  EXPECT_EQ(j["tiers"][1]["budget_bytes"], 3ull << 30);
}

TEST(ServerCliTest, MissingChartJsWarnsAndUnreachableRedisStartsDegraded) {
  TempDir dir;
  // Port 1 on loopback refuses connections: T2 is down at start-up.
  const std::string config = dir.path() + "/c.json";
  std::ofstream(config) << R"({"tenants": [{"name": "a", "credential": "pa"}],
    "chart_js": "/nonexistent/chart.min.js",
    "store": {"memory_budget_bytes": 67108864,
              "redis": {"endpoints": ["127.0.0.1:1"], "connect_timeout_ms": 100}}})";
  ServerProcess s;
  ASSERT_OK(s.Start(kServer, dir.path(), {"--config", config}));
  const std::string health =
      HttpRaw(s.http_port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(health.substr(0, health.find("\r\n")), "HTTP/1.1 200 OK") << health;
  EXPECT_NE(health.find("ok\nT2 down"), std::string::npos) << health;
  const std::string metrics =
      HttpRaw(s.http_port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(metrics.find("kvstash_tier_up{tier=\"T2\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("kvstash_tier_up{tier=\"T0\"} 1\n"), std::string::npos);
  // It serves: a PUT and a GET through the CLI.
  const std::string flags = " --server " + s.address() + " --tenant a --credential pa ";
  WriteFile(dir.path() + "/c1", RawPayload(16, 1));
  auto [rc, out] = Sh(kCli + " put" + flags + "--key " + kKey1 + " --payload " + dir.path() + "/c1");
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Sh(kCli + " get" + flags + "--key " + kKey1 + " --out " + dir.path() + "/o");
  EXPECT_EQ(rc, 0) << out;
  s.Kill(SIGTERM);
  // The start-up log names the missing Chart.js and the down T2 (a short run, SIGTERM).
  std::tie(rc, out) = Sh("timeout -s TERM 2 " + kServer + " --config " + config +
                         " --port 0 --http-port 0");
  EXPECT_NE(out.find("/nonexistent/chart.min.js\" is not a readable file"), std::string::npos)
      << out;
  EXPECT_NE(out.find("T2 (Redis) is down at start-up"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvstash::server
