// `kvstash-bench codec --codec spec --dtype bf16|fp8|both --json FILE`: the codec
// comparison table on SmolLM2-135M and real text (benchmarks/drivers/spec_bench.h).
// `kvstash-bench codec --codec dckv|kvtc|dckv+kvtc --rate R [--rate R2 ...] --json FILE`:
// rate-distortion rows of the lossy dckv codec and the KVTC-like baseline (benchmarks/drivers/dckv_bench.h).
// `kvstash-bench codec --codec spec --state --json FILE`: recurrent-state rows (part =
// state) of spec state coding on the real RWKV-7, then the tiny hybrid's rows (part kv
// and state; random weights) (benchmarks/drivers/spec_state_bench.h).
// `kvstash-bench codec --codec lossless-peers [--dtype bf16|f16|fp8|both] [--dump-dir DIR]
// --json FILE`: spec, byte-plane rANS, zstd -3/-19 and htscodecs order-0/1 on the same
// real KV chunks, every one round-tripped; ratio, encode and decode MB/s per CPU-second,
// spec's predictor time per token (benchmarks/drivers/lossless_peers_bench.h; "both"
// here means bf16, f16 and fp8; benchmarks/lossless_peers.py adds ZipNN from the dump).
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "benchmarks/drivers/dckv_bench.h"
#include "benchmarks/drivers/entropy_bench.h"
#include "benchmarks/drivers/lossless_peers_bench.h"
#include "benchmarks/drivers/spec_bench.h"
#include "benchmarks/drivers/spec_state_bench.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/dckv_flags.h"
#include "cli/output_paths.h"
#include "cli/spec_flags.h"
#include "common/default_paths.h"

namespace kvstash::cli {
namespace {

struct Options {
  std::string codec = "spec";
  std::string dtype = "both";
  std::string json;
  std::vector<double> rates;
  bench::SpecBenchOptions spec;
  bench::DckvBenchOptions dckv;
  bool state = false;
  bench::SpecStateBenchOptions spec_state;
  std::string dump_dir;  // lossless-peers: where the KV bytes go for benchmarks/lossless_peers.py
  // Whether the user chose the dckv weights (bench::ApplyDefaultSensitivity).
  CLI::Option* dckv_docs_option = nullptr;
  CLI::Option* dckv_file_option = nullptr;
};

// Prints a driver's table and writes its JSON to `json` (when set); the exit code.
int Report(const char* what, const Result<nlohmann::json>& out, void (*print)(const nlohmann::json&),
           const std::string& json) {
  if (!out.ok()) {
    std::cerr << what << ": " << out.status().ToString() << "\n";
    return 1;
  }
  print(*out);
  if (!json.empty() && !WriteJsonFile("bench codec", json, *out)) return 1;
  return 0;
}

void PrintStateTable(const nlohmann::json& out) {
  std::cout << std::left << std::setw(44) << "model part codec" << std::right << std::setw(8) << "tokens"
            << std::setw(11) << "states" << std::setw(13) << "raw_bytes" << std::setw(13) << "stored"
            << std::setw(9) << "vs raw" << std::setw(9) << "vs base" << std::setw(9) << "bits/sc"
            << std::setw(9) << "ideal" << std::setw(10) << "enc MB/s" << std::setw(10) << "dec MB/s"
            << std::setw(10) << "pred cost" << "\n";
  auto num = [](const nlohmann::json& r, const char* key, int prec) {
    if (!r.contains(key)) return std::string("-");
    std::ostringstream s;
    s << std::fixed << std::setprecision(prec) << r[key].get<double>();
    return s.str();
  };
  for (const auto& r : out["rows"]) {
    const std::string name = r.value("model", std::string()) + " " + r.value("part", std::string()) + " " +
                             r["codec"].get<std::string>();
    std::cout << std::left << std::setw(44) << name << std::right << std::setw(8)
              << r["tokens"].get<uint64_t>() << std::setw(11) << r["boundaries"].get<uint64_t>()
              << std::setw(13) << r["raw_bytes"].get<uint64_t>() << std::setw(13)
              << r["stored_bytes"].get<uint64_t>() << std::setw(9) << num(r, "ratio_vs_raw", 3)
              << std::setw(9) << num(r, "ratio_vs_baseline", 3) << std::setw(9) << num(r, "bits_per_scalar", 2)
              << std::setw(9) << num(r, "ideal_bits_per_scalar", 2) << std::setw(10) << num(r, "encode_mb_s", 1)
              << std::setw(10) << num(r, "decode_mb_s", 1) << std::setw(10)
              << num(r, "predictor_cost_vs_forward", 2) << "\n";
  }
}

int RunState(const Options& o) {
  return Report("kvstash-bench codec --state", bench::RunSpecStateBench(o.spec_state), PrintStateTable, o.json);
}

void PrintDckvTable(const nlohmann::json& out) {
  std::cout << std::left << std::setw(10) << "codec" << std::right << std::setw(8) << "rate" << std::setw(8)
            << "tokens" << std::setw(12) << "B/token" << std::setw(12) << "req B/tok" << std::setw(9)
            << "ratio" << std::setw(11) << "KL mean" << std::setw(9) << "top1" << std::setw(9) << "greedy"
            << std::setw(10) << "enc MB/s" << std::setw(10) << "dec MB/s"
            << "\n";
  auto num = [](const nlohmann::json& v, int prec) {
    if (v.is_null()) return std::string("-");
    std::ostringstream s;
    s << std::fixed << std::setprecision(prec) << v.get<double>();
    return s.str();
  };
  for (const auto& r : out["rows"]) {
    std::cout << std::left << std::setw(10) << r["codec"].get<std::string>() << std::right << std::setw(8)
              << num(r["rate"], 1) << std::setw(8) << r["tokens"].get<uint64_t>() << std::setw(12)
              << num(r["bytes_per_token"], 1) << std::setw(12) << num(r["request_bytes_per_token"], 1)
              << std::setw(9) << num(r["ratio_vs_bf16"], 2) << std::setw(11) << num(r["kl_mean"], 5)
              << std::setw(9) << num(r["top1_agreement"], 4) << std::setw(9) << num(r["greedy_match"], 3)
              << std::setw(10) << num(r["encode_mb_s"], 1) << std::setw(10) << num(r["decode_mb_s"], 1)
              << "\n";
    if (r.contains("artifact")) {  // a --dckv-artifact row: which file, what it holds
      std::cout << "          " << r["artifact"].get<std::string>() << ": "
                << r["active_components"].get<uint64_t>() << " active components"
                << (r["decoder_nets"].get<bool>() ? ", decoder nets" : "") << "\n";
    }
  }
}

int RunDckv(Options& o) {
  o.dckv.model_path = o.spec.model_path;
  if (!o.rates.empty()) o.dckv.rates = o.rates;
  bench::ApplyDefaultSensitivity(&o.dckv, o.dckv_file_option->count() > 0, o.dckv_docs_option->count() > 0);
  return Report("kvstash-bench codec", bench::RunDckvBench(o.dckv), PrintDckvTable, o.json);
}

void PrintPeersTable(const nlohmann::json& out) {
  const auto& setup = out["setup"];
  std::cout << "CPU " << setup["cpu_model"].get<std::string>() << ", load average " << setup["load_average_start"].dump()
            << " -> " << setup["load_average_end"].dump() << ", coding on 1 thread (MB/s of raw KV per CPU-second), "
            << "predictor on " << setup["threads"].get<int>() << "\n";
  std::cout << std::left << std::setw(18) << "codec" << std::setw(10) << "dtype" << std::right << std::setw(8)
            << "tokens" << std::setw(8) << "ratio" << std::setw(10) << "bits/sc" << std::setw(10) << "enc MB/s"
            << std::setw(10) << "dec MB/s" << std::setw(12) << "pred ms/tok" << std::setw(12) << "dec+pred" << "\n";
  auto num = [](const nlohmann::json& r, const char* key, int prec) {
    if (!r.contains(key) || r[key].is_null()) return std::string("-");
    std::ostringstream s;
    s << std::fixed << std::setprecision(prec) << r[key].get<double>();
    return s.str();
  };
  for (const auto& r : out["rows"]) {
    std::cout << std::left << std::setw(18) << r["codec"].get<std::string>() << std::setw(10)
              << r["dtype"].get<std::string>() << std::right << std::setw(8) << r["tokens"].get<uint64_t>()
              << std::setw(8) << num(r, "ratio", 3) << std::setw(10) << num(r, "bits_per_scalar", 3) << std::setw(10)
              << num(r, "encode_mb_s", 1) << std::setw(10) << num(r, "decode_mb_s", 1) << std::setw(12)
              << num(r, "predictor_cpu_ms_per_token", 3) << std::setw(12) << num(r, "decode_with_predictor_mb_s", 1)
              << "\n";
  }
  if (!bench::HtscodecsBuiltIn()) {
    std::cout << "SKIPPED: htscodecs rows (this build has no libhtscodecs-dev; scripts/setup.sh installs it)\n";
  }
}

int RunPeers(Options& o) {
  if (o.dtype == "both") {
    o.spec.dtypes = {DType::kBF16, DType::kF16, DType::kFP8E4M3};
  } else if (auto d = ParseDType(o.dtype);
             d.ok() && (*d == DType::kBF16 || *d == DType::kF16 || *d == DType::kFP8E4M3)) {
    o.spec.dtypes = {*d};
  } else {
    std::cerr << "kvstash-bench codec: --dtype must be bf16, f16, fp8 or both (all three) with lossless-peers\n";
    return 2;
  }
  bench::LosslessPeersBenchOptions peers;
  peers.spec = o.spec;
  peers.dump_dir = o.dump_dir;
  return Report("kvstash-bench codec", bench::RunLosslessPeersBench(peers), PrintPeersTable, o.json);
}

void PrintTable(const nlohmann::json& out) {
  std::cout << std::left << std::setw(16) << "codec" << std::setw(10) << "dtype" << std::right
            << std::setw(8) << "tokens" << std::setw(14) << "raw_bytes" << std::setw(14)
            << "stored_bytes" << std::setw(8) << "ratio" << std::setw(10) << "bits/sc"
            << std::setw(10) << "ideal" << std::setw(10) << "lossless" << std::setw(10) << "enc MB/s"
            << std::setw(10) << "dec MB/s" << std::setw(10) << "pred cost" << "\n";
  auto num = [](const nlohmann::json& v, int prec) {
    std::ostringstream s;
    if (v.is_null()) return std::string("-");
    if (v.is_boolean()) return std::string(v.get<bool>() ? "yes" : "NO");
    s << std::fixed << std::setprecision(prec) << v.get<double>();
    return s.str();
  };
  for (const auto& r : out["rows"]) {
    std::cout << std::left << std::setw(16) << r["codec"].get<std::string>() << std::setw(10)
              << r["dtype"].get<std::string>() << std::right << std::setw(8) << r["tokens"].get<uint64_t>()
              << std::setw(14) << r["raw_bytes"].get<uint64_t>() << std::setw(14)
              << r["stored_bytes"].get<uint64_t>() << std::setw(8) << num(r["ratio"], 3) << std::setw(10)
              << num(r["bits_per_scalar"], 3) << std::setw(10) << num(r["ideal_bits_per_scalar"], 3)
              << std::setw(10) << num(r["lossless"], 0) << std::setw(10) << num(r["encode_mb_s"], 1)
              << std::setw(10) << num(r["decode_mb_s"], 1) << std::setw(10)
              << num(r["predictor_cost_vs_prefill"], 2) << "\n";
  }
}

int Run(Options o) {
  // The results file's folder must exist before minutes of measurement, not after.
  if (!o.json.empty()) {
    const std::filesystem::path dir = std::filesystem::path(o.json).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      std::cerr << "kvstash-bench codec: IOError: cannot write " << o.json << ": " << dir.string()
                << " is not a folder\n";
      return 1;
    }
  }
  if (o.state) {
    if (o.codec != "spec") {
      std::cerr << "kvstash-bench codec: --state needs --codec spec\n";
      return 2;
    }
    return RunState(o);
  }
  if (o.codec == "dckv" || o.codec == "kvtc" || o.codec == "dckv+kvtc") {
    o.dckv.run_dckv = o.codec != "kvtc";
    o.dckv.run_kvtc = o.codec != "dckv";
    return RunDckv(o);
  }
  if (o.codec == "lossless-peers") return RunPeers(o);
  if (o.codec != "spec") {
    std::cerr << "kvstash-bench codec: codec '" << o.codec << "' is not available in this build "
              << "(available: spec, dckv, kvtc, dckv+kvtc, lossless-peers)\n";
    return 2;
  }
  if (o.dtype == "both") {
    o.spec.dtypes = {DType::kBF16, DType::kFP8E4M3};
  } else if (auto d = ParseDType(o.dtype); d.ok() && (*d == DType::kBF16 || *d == DType::kFP8E4M3)) {
    o.spec.dtypes = {*d};
  } else {
    std::cerr << "kvstash-bench codec: --dtype must be bf16, fp8 or both\n";
    return 2;
  }
  const auto out = bench::RunSpecBench(o.spec);
  if (const int rc = Report("kvstash-bench codec", out, PrintTable, o.json); rc != 0) return rc;
  for (const auto& r : (*out)["rows"]) {
    if (r["lossless"].is_boolean() && !r["lossless"].get<bool>()) return 3;  // never silent
  }
  return 0;
}

const bool kRegistered = RegisterCommand(
    "codec", "Compare KV codecs on a real model and real text (bits/scalar, ratio, speed)",
    [](CLI::App* cmd) {
      auto o = std::make_shared<Options>();
      o->spec.model_path = DefaultModelPath();
      o->spec.artifact_dir = DefaultArtifactDir();
      cmd->add_option("--codec", o->codec, "Codec to measure: spec, dckv, kvtc, dckv+kvtc or lossless-peers")
          ->capture_default_str();
      cmd->add_option("--rate", o->rates, "dckv: target ratio vs bf16 (repeatable; default 8 16 24 32 48)")
          ->check(DckvRatioValidator());
      cmd->add_option("--prompts", o->dckv.prompts, "dckv: evaluation prompts")->capture_default_str();
      cmd->add_option("--prompt-tokens", o->dckv.prompt_tokens, "dckv: tokens per prompt")->capture_default_str();
      cmd->add_option("--continuation-tokens", o->dckv.continuation_tokens,
                      "dckv: teacher-forced continuation tokens")->capture_default_str();
      cmd->add_option("--greedy-tokens", o->dckv.greedy_tokens, "dckv: greedy tokens compared")->capture_default_str();
      cmd->add_option("--group-layers", o->dckv.group_layers, "dckv: layers per transform group")->capture_default_str();
      cmd->add_flag("!--no-conditional", o->dckv.conditional, "dckv: no token-conditioned entropy models");
      cmd->add_flag("!--no-checkerboard", o->dckv.checkerboard, "dckv: no checkerboard context model");
      cmd->add_option("--embed-rank", o->dckv.embed_rank, "dckv: reduced token embedding size")->capture_default_str();
      cmd->add_option("--raw-head", o->dckv.raw_head, "dckv: bf16 positions at the prefix start")->capture_default_str();
      cmd->add_option("--raw-tail", o->dckv.raw_tail, "dckv: bf16 positions at the prefix end")->capture_default_str();
      cmd->add_option("--dckv-cal-tokens", o->dckv.cal_tokens, "dckv: calibration tokens")->capture_default_str();
      o->dckv_docs_option = cmd->add_option("--dckv-sensitivity-docs", o->dckv.sensitivity_docs,
                                            "dckv: measure per-block output weights on this many calibration "
                                            "documents (0: MSE allocation) instead of reading a weights file "
                                            "(default 2 when no file is used; the default model uses its committed file)");
      o->dckv_file_option = cmd->add_option("--dckv-sensitivity-file", o->dckv.sensitivity_file,
                                            "dckv: per-dimension output weights from tools/dckv_output_fisher.py "
                                            "(default with the default model: "
                                            "benchmarks/inputs/smollm2-135m-dckv-fisher.json)")
                                ->check(CLI::ExistingFile)
                                ->excludes(o->dckv_docs_option);
      cmd->add_option("--dckv-sensitivity-floor", o->dckv.sensitivity_floor,
                      "dckv: output weights below this x their mean are raised to it")
          ->capture_default_str()->check(PositiveFiniteValidator());
      cmd->add_flag("!--dckv-weighted-steps", o->dckv.weighted_pca,
                    "dckv: sensitivity weights on the steps of a plain PCA instead of a weighted PCA");
      cmd->add_option("--threshold", o->dckv.active_threshold, "dckv: component off below scale/step")
          ->capture_default_str()->check(CLI::NonNegativeNumber);
      cmd->add_option("--dckv-artifact", o->dckv.artifact_files,
                      "dckv: also score this artifact file (repeatable; e.g. a trained codec imported by "
                      "kvstash calibrate dckv --trained): one dckv-file row each");
      cmd->add_option("--dckv-artifact-dir", o->dckv.artifact_dir,
                      "dckv: write the artifacts here (empty: do not write)")->capture_default_str();
      cmd->add_option("--dtype", o->dtype,
                      "KV dtype: bf16, fp8 or both (lossless-peers: bf16, f16, fp8 or both = all three)")
          ->capture_default_str();
      cmd->add_option("--dump-dir", o->dump_dir,
                      "lossless-peers: write the evaluation KV bytes here (kv-<dtype>.bin) for "
                      "benchmarks/lossless_peers.py");
      cmd->add_option("--json", o->json, "Write the table (rows, breakdown, setup) to FILE as JSON")
          ->check(WritableOutputFile());
      cmd->add_option("--eval-tokens", o->spec.eval_tokens, "Evaluation tokens")->capture_default_str();
      AddSpecRunOptions(cmd, &o->spec);
      cmd->add_flag("--state", o->state,
                    "spec: code the recurrent state of the real RWKV-7 against its predicted state");
      cmd->add_option("--state-model", o->spec_state.model_path,
                      "--state: RWKV-7 model file (default: $KVSTASH_SHARED_MODELS_DIR or "
                      "../shared/models, tiny-rwkv-7v0-834K-FP32.bin)");
      cmd->add_option("--state-every", o->spec_state.every, "--state: boundary spacing in tokens")
          ->capture_default_str();
      cmd->add_option("--state-predictors", o->spec_state.predictors,
                      "--state: predictor variants (int8-gN, bf16, fp16, fp32)")
          ->delimiter(',')
          ->capture_default_str();
      cmd->add_option("--state-cal-texts", o->spec_state.cal_texts, "--state: calibration texts")
          ->delimiter(',')
          ->capture_default_str();
      cmd->add_option("--state-eval-texts", o->spec_state.eval_texts, "--state: evaluation texts")
          ->delimiter(',')
          ->capture_default_str();
      cmd->add_option("--artifact-dir", o->spec.artifact_dir,
                      "Write the calibrated spec artifacts here (empty: do not write)")->capture_default_str();
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
