// `kvstash-demo --model-kind hybrid`, scaled down (label integration): its own
// kvstash-server process on loopback (free ports, RocksDB in a temp folder), the tiny
// Qwen3.5 fixture, 2 documents of 300 tokens x 3 questions, 64-token chunks with a
// state record every 2 chunks and at the prefix end, codecs raw and spec (predictor
// calibrated on 2,048 tokens) and dckv (attention KV lossy, state exact). Asserts the JSON table: every hit
// restored KV + state byte-exact and continued bit-identically to the full prefill (dckv: state exact,
// continuation scored), the hit counts, the
// bytes stored (KV + one state record per boundary; spec below raw).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_util.h"

namespace {

TEST(HybridDemoTest, ScaledDownHybridDemoIsExactOnEveryHit) {
  const std::string tokenizer = kvstash::testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(tokenizer))
    GTEST_SKIP() << tokenizer << " absent (its tokenizer builds the workload): run scripts/setup.sh";
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvstash-hybrid-demo-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string json = (dir / "demo.json").string();
  const std::string cmd =
      std::string(KVSTASH_DEMO_BIN) +
      " --model-kind hybrid --codec raw --codec spec --codec dckv --hybrid-cal-tokens 2048 --start-server " +
      KVSTASH_SERVER_BIN + " --data-dir " + (dir / "data").string() + " --port 0 --http-port 0" +
      " --model " + tokenizer + " --documents 2 --doc-tokens 300 --requests-per-doc 3" +
      " --gen-tokens 4 --hybrid-chunk-tokens 64 --state-every 2 --restore-policy always --json " + json +
      " > " + (dir / "out.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  std::ifstream out_file(dir / "out.txt");
  const std::string out((std::istreambuf_iterator<char>(out_file)), {});
  // 0: all checks held; 1: one failed (only the TTFT comparison may, on a loaded machine).
  ASSERT_LE(WEXITSTATUS(rc), 1) << out;

  std::ifstream f(json);
  ASSERT_TRUE(f.good()) << out;
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["rows"].size(), 3u) << out;
  const std::string codecs[] = {"raw", "spec", "dckv"};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(codecs[i]);
    const auto& r = j["rows"][i];
    EXPECT_EQ(r["codec"], codecs[i]);
    EXPECT_EQ(r["requests"], 6);
    EXPECT_EQ(r["misses"], 2) << out;  // the first request of each document
    EXPECT_EQ(r["hits"], 4) << out;
    EXPECT_EQ(r["hits_verified"], 4) << out;
    EXPECT_EQ(r["hits_mismatched"], 0) << out;
    EXPECT_EQ(r["hits_state_exact"], 4) << out;
    if (i < 2) {  // lossless
      EXPECT_EQ(r["hits_kv_exact"], 4) << out;
      EXPECT_EQ(r["hits_continuation_exact"], 4) << out;
      EXPECT_EQ(r["same_tokens_as_fp32"], 4) << out;
    } else {  // dckv: lossy KV, exact state, quality scored on every continuation row
      EXPECT_GT(r["scored_positions"].get<int>(), 4 * 10);
      EXPECT_GT(r["top1_agreement"].get<double>(), 0.5);
      EXPECT_GE(r["kl_mean"].get<double>(), 0.0);
    }
    EXPECT_GT(r["token_hit_rate"].get<double>(), 0.5);

    // Per document: prefix = system prompt + 300 tokens (> 256, < 384), so chunks of 64
    // give states at 128, 256 and the prefix end: 3 records of the tiny model's fixed
    // state size, 2 documents.
    const uint64_t state_bytes = j["setup"]["state_bytes_per_boundary"];
    EXPECT_EQ(state_bytes, 3u * (96u * 3u + 4u * 16u * 8u) * 4u);  // 3 linear layers x (conv + delta), fp32
    EXPECT_EQ(r["states_put"], 6);
    EXPECT_EQ(r["state_raw_bytes"].get<uint64_t>(), 6 * state_bytes);
    if (i != 1) {
      // raw records (raw and dckv): the tensors plus names and headers
      EXPECT_GT(r["state_stored_bytes"].get<uint64_t>(), r["state_raw_bytes"].get<uint64_t>());
    } else {
      // spec: coded against the int8 predictor (random weights: not a representative
      // ratio).
      EXPECT_LT(r["state_stored_bytes"].get<uint64_t>(), r["state_raw_bytes"].get<uint64_t>());
      EXPECT_LT(r["stored_bytes"].get<uint64_t>(), r["raw_bytes"].get<uint64_t>());
      EXPECT_GT(r["hit_breakdown_ms"]["predictor"].get<double>(), 0.0);
    }
    if (i == 2) EXPECT_LT(r["stored_bytes"].get<uint64_t>(), r["raw_bytes"].get<uint64_t>());
    // KV: 1 attention layer x 2 KV heads x 16 x (K, V) x fp32 = 256 B per token.
    EXPECT_EQ(j["setup"]["kv_bytes_per_token"], 256);
    const uint64_t prefix_tokens = r["kv_raw_bytes"].get<uint64_t>() / 256;
    EXPECT_GT(prefix_tokens, 2u * 300u);
    EXPECT_LT(prefix_tokens, 2u * 384u);
  }
  EXPECT_TRUE(j["acceptance"]["state_kv_continuation_exact_on_every_hit"].get<bool>()) << out;
  EXPECT_TRUE(j["acceptance"]["no_mismatch"].get<bool>()) << out;
  EXPECT_EQ(j["setup"]["predictor"], "int8-g16");
  std::filesystem::remove_all(dir);
}

}  // namespace
