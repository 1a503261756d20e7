// `kvstash-bench prefill`: flags and table of the prefill benchmark
// (benchmarks/drivers/prefill_bench.h).
#include <cstdio>
#include <iostream>

#include "benchmarks/drivers/prefill_bench.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"

namespace kvstash::cli {
namespace {

struct BenchPrefillOptions {
  std::string json;
  bench::PrefillBenchOptions bench;
};

int Fail(const Status& s) {
  std::cerr << "kvstash-bench prefill: " << s.ToString() << "\n";
  return 1;
}

void PrintRow(const nlohmann::json& row, bool profile) {
  const uint32_t n = row["tokens"];
  const double med = row["median_s"];
  std::printf("%6u  %7d  %8.3f  %8.1f  %12.1f", n, row["threads"].get<int>(), med, n / med,
              row["peak_rss_mib"].get<double>());
  if (row.contains("predictor")) {
    const double pmed = row["predictor_median_s"];
    std::printf("  %13.3f  %13.1f  %9.3f", pmed, n / pmed, pmed / med);
    std::printf("\n        CPU seconds (median): prefill %.3f, predictor %.3f, ratio %.3f",
                row["cpu_median_s"].get<double>(), row["predictor_cpu_median_s"].get<double>(),
                row["predictor_cpu_cost_vs_prefill"].get<double>());
    if (profile) {
      const auto& p = row["predictor_profile_s"];
      std::printf("\n        predictor split (median run): quantise %.3f s, int GEMM %.3f s, attention %.3f s, "
                  "norm+RoPE %.3f s, other %.3f s",
                  p["quantize"].get<double>(), p["gemm"].get<double>(), p["attention"].get<double>(),
                  p["norm_rope"].get<double>(), p["other"].get<double>());
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

int Run(const BenchPrefillOptions& o) {
  bench::PrefillBenchObserver obs;
  obs.on_start = [&](const std::string& model, size_t text_tokens, const std::string& predictor, int threads) {
    std::cout << "model " << model << "\ntext " << o.bench.text << " (" << text_tokens << " tokens)\n";
    if (!predictor.empty()) std::cout << "predictor " << predictor << ", " << threads << " threads\n";
    std::cout << "tokens  threads  median_s  tokens/s  peak_rss_MiB"
              << (!predictor.empty() ? "  pred_median_s  pred_tokens/s  pred_cost" : "") << "\n";
  };
  obs.on_row = [&](const nlohmann::json& row) { PrintRow(row, o.bench.profile); };
  auto rows = bench::RunPrefillBench(o.bench, obs);
  if (!rows.ok()) return Fail(rows.status());
  if (!o.json.empty()) {
    if (!WriteJsonFile("bench prefill", o.json, *rows)) return 1;
  }
  return 0;
}

const bool kRegistered = RegisterCommand(
    "prefill", "Prefill tokens/s of the reference runtime on real text (128/512/2048 tokens)",
    [](CLI::App* cmd) {
      auto o = std::make_shared<BenchPrefillOptions>();
      cmd->add_option("--model", o->bench.model, "Model file")->capture_default_str();
      cmd->add_option("--text", o->bench.text, "UTF-8 text to take the prompt tokens from")->capture_default_str();
      cmd->add_option("--lengths", o->bench.lengths, "Prompt lengths in tokens")->capture_default_str();
      cmd->add_option("--reps", o->bench.reps, "Runs per length (median reported)")->capture_default_str();
      cmd->add_option("--threads", o->bench.threads, "BLAS threads (0: library default)")->capture_default_str();
      cmd->add_option("--json", o->json, "Write rows to FILE as JSON")
          ->check(WritableOutputFile());
      cmd->add_flag("--predictor", o->bench.predictor,
                    "Also time the spec predictor on the same tokens (cost = predictor / prefill)");
      cmd->add_flag("--profile", o->bench.profile, "With --predictor: the predictor's per-step split");
      cmd->add_option("--predictor-group", o->bench.predictor_group, "Predictor quantisation group (0: per row)")
          ->capture_default_str();
      cmd->add_option("--predictor-activation-bits", o->bench.predictor_activation_bits,
                      "Predictor activation bits (8 or 16)")
          ->capture_default_str();
      cmd->add_option_function<std::string>(
             "--predictor-attention",
             [o](const std::string& v) { o->bench.predictor_int8_attention = v == "int8"; },
             "Predictor attention: fp32 (default) or int8 (the \"-attn8\" variant)")
          ->check(CLI::IsMember({"fp32", "int8"}));
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
