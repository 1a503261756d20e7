// The demo's workload and checks, scaled down (label integration): `kvstash-demo` with
// its own kvstash-server process on loopback (free ports, RocksDB in a temp folder),
// 2 documents of 256 tokens x 3 questions, all three codecs. Asserts what the full demo
// promises except timings (speed targets live in benchmarks; a hit-faster-than-miss check
// here failed under load, when the machine's other work lands on the hits): every field of the JSON
// table, token hit rate > 50%, every spec and raw hit bit-exact with the reference
// answer, no mismatched hit, dckv quality measured, compression for spec and dckv; for
// the reference engine and for llama.cpp (the default engine, when built with it), and
// for llama.cpp on Qwen2.5-Coder-0.5B (int predictor arithmetic; skipped with a message
// when scripts/fetch_qwen2.sh has not fetched the file, as in CI).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_util.h"

namespace {

// Runs `kvstash-demo` scaled down (`size`: by default 2 documents of 256 tokens; x 3
// questions, all three codecs unless `extra` names them) with its own server and `extra`
// flags; returns the JSON table and the output.
struct DemoRun {
  nlohmann::json j;
  std::string out;
  std::filesystem::path dir;
};

DemoRun RunDemo(const std::string& model, const std::string& name, const std::string& extra,
                const std::string& size = "--documents 2 --doc-tokens 256") {
  DemoRun run;
  run.dir = std::filesystem::temp_directory_path() / ("kvstash-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(run.dir);
  std::filesystem::create_directories(run.dir);
  const std::string json = (run.dir / "demo.json").string();
  const std::string cmd = std::string(KVSTASH_DEMO_BIN) + " --start-server " + KVSTASH_SERVER_BIN +
                          " --data-dir " + (run.dir / "data").string() + " --port 0 --http-port 0" +
                          " --model " + model + " " + size + " --requests-per-doc 3" +
                          " --gen-tokens 4 --cal-tokens 256 --cache-dir " + (run.dir / "cache").string() +
                          " --json " + json + " --restore-policy always " + extra + " > " +
                          (run.dir / "out.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out_file(run.dir / "out.txt");
  run.out.assign(std::istreambuf_iterator<char>(out_file), {});
  EXPECT_TRUE(WIFEXITED(rc)) << run.out;
  // 0: all acceptance checks held; 1: one failed (here only timing may, on a loaded machine).
  EXPECT_LE(WEXITSTATUS(rc), 1) << run.out;
  EXPECT_NE(run.out.find("dashboard: http://127.0.0.1:"), std::string::npos) << run.out;
  std::ifstream f(json);
  EXPECT_TRUE(f.good()) << run.out;
  if (f.good()) run.j = nlohmann::json::parse(f);
  return run;
}

TEST(DemoTest, ScaledDownDemoPassesItsChecks) {
  const std::string model = kvstash::testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " absent: run scripts/setup.sh";
  const DemoRun run = RunDemo(model, "demo-test", "--engine reference");
  const auto& j = run.j;
  const std::string& out = run.out;
  const auto& dir = run.dir;
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["setup"]["engine"], "reference");
  ASSERT_EQ(j["rows"].size(), 3u) << out;
  const char* const fields[] = {"codec", "requests", "token_hit_rate", "raw_bytes", "stored_bytes", "ratio",
                                "ttft_miss_ms", "ttft_hit_ms", "hits_verified", "hits_mismatched",
                                "hit_breakdown_ms"};
  const std::string codecs[] = {"raw", "spec", "dckv"};
  for (size_t i = 0; i < 3; ++i) {
    const auto& r = j["rows"][i];
    SCOPED_TRACE(codecs[i]);
    for (const char* k : fields) EXPECT_TRUE(r.contains(k)) << k;
    for (const char* k : {"lookup", "network", "store", "predictor", "decode", "suffix_prefill"}) {
      EXPECT_TRUE(r["hit_breakdown_ms"].contains(k)) << k;
    }
    EXPECT_EQ(r["codec"], codecs[i]);
    EXPECT_EQ(r["requests"], 6);
    EXPECT_EQ(r["misses"], 2);  // the first request of each document
    EXPECT_EQ(r["hits"], 4);
    EXPECT_GT(r["token_hit_rate"].get<double>(), 0.5);
    EXPECT_EQ(r["hits_mismatched"], 0) << out;
    EXPECT_EQ(r["hits_verified"], 4) << out;
    EXPECT_GT(r["ttft_miss_ms"].get<double>(), 0);
    EXPECT_GT(r["ttft_hit_ms"].get<double>(), 0);
    // --restore-policy always: every LOOKUP hit restored, each with its estimate; the
    // model had a prefill and an encode sample (the misses) before the first hit.
    EXPECT_EQ(r["declined"], 0);
    EXPECT_EQ(r["declined_share"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(r["lookup_hit_rate"].get<double>(), r["token_hit_rate"].get<double>());
    ASSERT_EQ(r["estimates"].size(), 4u) << out;
    for (const auto& e : r["estimates"]) {
      EXPECT_TRUE(e["taken"].get<bool>());
      EXPECT_TRUE(e["informed"].get<bool>());
      EXPECT_GT(e["restore_est_ms"].get<double>(), 0);
      EXPECT_GT(e["recompute_est_ms"].get<double>(), 0);
      EXPECT_GT(e["measured_ms"].get<double>(), 0);
      EXPECT_GE(e["error"].get<double>(), 0);
    }
    EXPECT_GE(r["median_estimate_error"].get<double>(), 0);
    // Both documents' prefixes (system prompt + 256 tokens) were PUT once, as bf16 KV.
    EXPECT_GT(r["raw_bytes"].get<uint64_t>(), 2u * 256u * 23040u);
  }
  EXPECT_NEAR(j["rows"][0]["ratio"].get<double>(), 1.0, 0.001);  // raw: headers only
  EXPECT_GT(j["rows"][1]["ratio"].get<double>(), 2.0);            // spec, lossless
  EXPECT_GT(j["rows"][2]["ratio"].get<double>(), 1.5);            // dckv, lossy
  EXPECT_TRUE(j["rows"][1]["top1_agreement"].is_null());
  EXPECT_GT(j["rows"][2]["scored_positions"].get<int>(), 0);
  EXPECT_GT(j["rows"][2]["top1_agreement"].get<double>(), 0.5);
  EXPECT_GE(j["rows"][2]["kl_mean"].get<double>(), 0.0);
  EXPECT_GT(j["rows"][1]["hit_breakdown_ms"]["predictor"].get<double>(), 0);
  EXPECT_TRUE(j["acceptance"]["token_hit_rate_over_50"].get<bool>());
  EXPECT_TRUE(j["acceptance"]["no_mismatch"].get<bool>());
  std::filesystem::remove_all(dir);
}

#if KVSTASH_DEMO_HAS_LLAMA
// The rows of a llama.cpp demo run of raw, spec and dckv over `documents` documents x 3
// questions: per codec one miss and two verified hits per document, none mismatched,
// checked against llama.cpp's full prefill, and the stored f16 bytes half the restored
// tokens' (each document stored once, hit twice) at kv_bytes_per_token.
void ExpectLlamaRows(const DemoRun& run, int documents, uint64_t kv_bytes_per_token) {
  const auto& j = run.j;
  ASSERT_EQ(j["rows"].size(), 3u) << run.out;
  const std::string codecs[] = {"raw", "spec", "dckv"};
  for (size_t i = 0; i < 3; ++i) {
    const auto& r = j["rows"][i];
    SCOPED_TRACE(codecs[i]);
    EXPECT_EQ(r["codec"], codecs[i]);
    EXPECT_EQ(r["requests"], 3 * documents);
    EXPECT_EQ(r["misses"], documents);
    EXPECT_EQ(r["hits"], 2 * documents);
    EXPECT_EQ(r["hits_mismatched"], 0) << run.out;
    EXPECT_EQ(r["hits_verified"], 2 * documents) << run.out;
    EXPECT_EQ(r["reference"], "llama.cpp full prefill");
    EXPECT_EQ(2 * r["raw_bytes"].get<uint64_t>(), r["matched_tokens"].get<uint64_t>() * kv_bytes_per_token);
  }
}

// The default engine: llama.cpp prefills the misses and its own f16 cache is stored and
// restored. Every raw/spec hit is logit-identical to a llama.cpp prefill with the same
// batch split; the chains cover each document's prefix (system prompt + document).
TEST(DemoTest, LlamaCppEngineDemoPassesItsChecks) {
  const std::string model = kvstash::testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " absent: run scripts/setup.sh";
  const DemoRun run = RunDemo(model, "llama-demo-test", "--llama-threads 1");  // llama.cpp is the default
  const auto& j = run.j;
  ASSERT_TRUE(j.is_object()) << run.out;
  EXPECT_EQ(j["setup"]["engine"], "llama.cpp");
  EXPECT_EQ(j["setup"]["kv_dtype"], "f16");
  // SmolLM2's Q4_1 file runs on the ggml arithmetic (--predictor-arithmetic auto).
  EXPECT_EQ(j["setup"]["predictor_arithmetic"], "ggml");
  EXPECT_EQ(j["setup"]["predictor"], "ggml-q4_1-f16");
  // Each document is hit twice and stored once: the stored f16 bytes are half the
  // restored tokens at 30 layers x 2 x 3 heads x 64 x 2 bytes = 23,040 bytes a token.
  ExpectLlamaRows(run, /*documents=*/2, /*kv_bytes_per_token=*/23040);
  EXPECT_EQ(j["rows"][0]["same_tokens_as_fp32"], 4);
  EXPECT_EQ(j["rows"][1]["same_tokens_as_fp32"], 4);
  EXPECT_NEAR(j["rows"][0]["ratio"].get<double>(), 1.0, 0.002);  // raw: headers only
  EXPECT_GT(j["rows"][1]["ratio"].get<double>(), 1.5);            // spec, lossless on llama.cpp's KV
  EXPECT_GT(j["rows"][2]["ratio"].get<double>(), 1.5);            // dckv, lossy
  EXPECT_GT(j["rows"][2]["scored_positions"].get<int>(), 0);
  EXPECT_GT(j["rows"][2]["top1_agreement"].get<double>(), 0.5);
  // dckv is fitted on llama.cpp's own f16 KV of the calibration text (K rotated back to
  // before RoPE), with the conditional models and the committed Fisher weights; those
  // rows are within 3% (K) and 7% (V) relative RMS of our runtime's (llama.cpp's Q8_1
  // activations; tests/llama_cpp/llama_dckv_rows_test.cc derives the bounds).
  const auto& fit = j["setup"]["dckv_fit"];
  ASSERT_TRUE(fit.is_object()) << run.out;
  EXPECT_EQ(fit["rows"], "llama.cpp f16 KV, K rotated back to before RoPE");
  EXPECT_EQ(fit["conditional"], true);
  EXPECT_NE(fit["weights"].get<std::string>().find("smollm2-135m-dckv-fisher.json"), std::string::npos);
  EXPECT_GT(fit["rows_rel_rms_vs_our_runtime"]["k_pre_rope"].get<double>(), 0.0);
  EXPECT_LT(fit["rows_rel_rms_vs_our_runtime"]["k_pre_rope"].get<double>(), 0.03);
  EXPECT_LT(fit["rows_rel_rms_vs_our_runtime"]["v"].get<double>(), 0.07);
  const auto& bits = j["spec_bits_per_scalar"];
  ASSERT_TRUE(bits.is_object()) << run.out;
  EXPECT_NEAR(bits["llama_cpp_kv"].get<double>(), 16.0 / j["rows"][1]["ratio"].get<double>(), 1e-9);
  EXPECT_GT(bits["our_runtime_kv"].get<double>(), 0.0);
  EXPECT_LT(bits["our_runtime_kv"].get<double>(), 16.0);
  EXPECT_TRUE(j["acceptance"]["token_hit_rate_over_50"].get<bool>());
  EXPECT_TRUE(j["acceptance"]["no_mismatch"].get<bool>());
  // A raw hit prefills ~20 question tokens instead of ~300.
  EXPECT_LT(j["rows"][0]["ttft_hit_ms"].get<double>(), j["rows"][0]["ttft_miss_ms"].get<double>());
  std::filesystem::remove_all(run.dir);
}

// Qwen2.5-Coder-0.5B (issue #36) on llama.cpp: q/k/v biases and Q5_0/Q8_0/Q4_K/Q6_K
// blocks, which the ggml arithmetic cannot run, so --predictor-arithmetic auto picks the
// int arithmetic (W8A16-g128) and says why. One document of 256 tokens x 3 questions:
// every raw/spec hit logit-identical to llama.cpp's own prefill with the same split and
// the same answer; dckv runs on its geometry (24 layers x 2 KV heads x 64). Skipped
// when the file is absent (CI: scripts/fetch_qwen2.sh fetches it).
TEST(DemoTest, LlamaCppEngineDemoOnQwen2) {
  const std::string model = kvstash::testing::ModelsDir() + "/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
  if (!std::filesystem::exists(model)) {
    GTEST_SKIP() << model
                 << " absent: run scripts/fetch_qwen2.sh (or KVSTASH_MODEL_QWEN2=1 scripts/setup.sh)";
  }
  const DemoRun run =
      RunDemo(model, "llama-qwen2-demo-test", "--llama-threads 1 --codec raw --codec spec --codec dckv",
              "--documents 1 --doc-tokens 256");
  const auto& j = run.j;
  ASSERT_TRUE(j.is_object()) << run.out;
  EXPECT_EQ(j["setup"]["engine"], "llama.cpp");
  EXPECT_EQ(j["setup"]["predictor_arithmetic"], "int");
  EXPECT_EQ(j["setup"]["predictor"], "w8a16-g128");
  EXPECT_NE(
      run.out.find("spec predictor: w8a16-g128, int arithmetic (auto: the ggml arithmetic cannot run this "
                   "model (spec predictor: the ggml arithmetic has no q/k/v biases (qwen2)"),
      std::string::npos)
      << run.out;
  // The document is hit twice and stored once, at 24 layers x 2 x 2 heads x 64 x 2
  // bytes = 12,288 f16 bytes a token.
  ExpectLlamaRows(run, /*documents=*/1, /*kv_bytes_per_token=*/12288);
  EXPECT_EQ(j["rows"][0]["same_tokens_as_fp32"], 2);
  EXPECT_EQ(j["rows"][1]["same_tokens_as_fp32"], 2);
  EXPECT_NEAR(j["rows"][0]["ratio"].get<double>(), 1.0, 0.002);  // raw: headers only
  EXPECT_GT(j["rows"][1]["ratio"].get<double>(), 1.3);           // spec, lossless on llama.cpp's KV
  EXPECT_GT(j["rows"][2]["ratio"].get<double>(), 1.5);           // dckv, lossy
  EXPECT_GT(j["rows"][2]["scored_positions"].get<int>(), 0);
  EXPECT_GT(j["rows"][2]["top1_agreement"].get<double>(), 0.5);
  EXPECT_TRUE(j["acceptance"]["token_hit_rate_over_50"].get<bool>());
  EXPECT_TRUE(j["acceptance"]["no_mismatch"].get<bool>());
  std::filesystem::remove_all(run.dir);
}
#endif

}  // namespace
