// `kvstash-bench link --json FILE`: flags and table of the slow-link restore benchmark
// (benchmarks/drivers/link_bench.h): restoring a SmolLM2 prefix from a kvstash-server
// in another network namespace over a shaped link, per codec, next to recomputing it.
// Exit codes: 0 done; 1 error; 2 usage; 77 skipped (not root / no CAP_NET_ADMIN, no
// ip or tc, no /dev/net/tun: the message says which).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "benchmarks/drivers/link_bench.h"
#include "benchmarks/drivers/netns_link.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"

namespace kvstash::cli {
namespace {

constexpr int kExitSkipped = 77;

struct BenchLinkOptions {
  std::string json;
  std::vector<std::string> rates;  // "10G", "100M", "1e9" ...
  bool cleanup = false;
  bench::LinkBenchOptions bench;
};

// "10G" / "1g" / "100M" / "64k" / "1e9" (bit/s); -1 when not a positive number.
double ParseRate(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(v > 0)) return -1;
  const std::string unit(end);
  if (unit == "G" || unit == "g" || unit == "gbit") return v * 1e9;
  if (unit == "M" || unit == "m" || unit == "mbit") return v * 1e6;
  if (unit == "k" || unit == "K" || unit == "kbit") return v * 1e3;
  return unit.empty() || unit == "bit" ? v : -1;
}

std::string Cross(const nlohmann::json& v) {
  if (v.is_null()) return "never (restore > recompute at any rate)";
  char b[64];
  std::snprintf(b, sizeof b, "%.1f Mbit/s", v.get<double>() / 1e6);
  return b;
}

int Run(BenchLinkOptions& o) {
  if (o.cleanup) {
    auto swept = bench::SweepStaleLinks();
    if (!swept.ok()) {
      std::cerr << "kvstash-bench link: " << swept.status().ToString() << "\n";
      return 1;
    }
    std::printf("removed %zu stale kvstash-link namespace(s)\n", swept->size());
    for (const auto& n : *swept) std::printf("  %s\n", n.c_str());
    return 0;
  }
  if (!o.rates.empty()) {
    o.bench.rates.clear();
    for (const auto& r : o.rates) {
      const double v = ParseRate(r);
      if (v < 8000) {
        std::cerr << "kvstash-bench link: --rate " << r << ": want a rate of at least 8k (e.g. 10G, 100M)\n";
        return 2;
      }
      o.bench.rates.push_back(v);
    }
  }
  if (Status s = bench::CheckLinkPrerequisites(); !s.ok()) {
    std::cerr << "kvstash-bench link: skipped: " << s.message() << "\n";
    return kExitSkipped;
  }
  auto res = bench::RunLinkBench(o.bench, std::cerr);
  if (!res.ok()) {
    std::cerr << "kvstash-bench link: " << res.status().ToString() << "\n";
    return res.status().IsInvalidArgument() ? 2 : 1;
  }
  std::printf("\n%zu-token prefix; recompute (prefill, reference runtime, %u threads) %.1f ms; RTT %.0f ms\n",
              res->setup["prefix_tokens"].get<size_t>(), res->setup["cpus"].get<unsigned>(),
              res->setup["recompute_ms"].get<double>(), res->setup["rtt_ms"].get<double>());
  std::printf("%-11s %-5s %9s %4s %8s %9s %9s %9s %8s %9s %9s %8s\n", "rate", "codec", "stored MB", "reps",
              "lookup", "get ms", "xfer ms", "predict", "decode", "restore", "recompute", "/recomp");
  for (const auto& r : res->rows) {
    std::printf("%-11s %-5s %9.3f %4u %8.1f %9.1f %9.1f %9.1f %8.1f %9.1f %9.1f %8.2f\n",
                r["rate"].get<std::string>().c_str(), r["codec"].get<std::string>().c_str(),
                r["stored_bytes"].get<double>() / 1e6, r["reps"].get<unsigned>(), r["lookup_ms"].get<double>(),
                r["get_ms"].get<double>(), r["transfer_ms"].get<double>(), r["predictor_ms"].get<double>(),
                r["decode_ms"].get<double>(), r["restore_ms"].get<double>(), r["recompute_ms"].get<double>(),
                r["restore_over_recompute"].get<double>());
  }
  std::printf("(ms, medians; reps are cut at slow rates to --max-cell-seconds of wire time; recompute: one\n"
              " prefill right after the cell's restores)\n\ncrossover "
              "(restore == recompute; restore wins above it):\n");
  for (const auto& x : res->crossover) {
    std::printf("  %-5s %s (fixed cost %.1f ms; predictor + decode CPU = %.2f x the prefill's)\n",
                x["codec"].get<std::string>().c_str(), Cross(x["crossover_bits_per_s"]).c_str(),
                x["fixed_ms"].get<double>(), x["restore_cpu_over_recompute_cpu"].get<double>());
  }
  if (!o.json.empty()) {
    nlohmann::json j;
    j["setup"] = res->setup;
    j["setup"]["run"] = "sudo build/kvstash-bench link --json benchmarks/results/bench_link.json";
    j["rows"] = res->rows;
    j["crossover"] = res->crossover;
    if (!WriteJsonFile("bench link", o.json, j)) return 1;
  }
  return 0;
}

const bool kRegistered = RegisterCommand(
    "link",
    "Restore a SmolLM2 prefix over a shaped link (netns + tbf; needs root) vs recomputing it",
    [](CLI::App* cmd) {
      cmd->footer("Exit status: 0 done; 1 error; 2 usage error; 77 skipped (not root or no CAP_NET_ADMIN, "
                  "no ip or tc, no /dev/net/tun: the message says which).");
      auto o = std::make_shared<BenchLinkOptions>();
      cmd->add_option("--json", o->json, "Write {setup, rows, crossover} to FILE as JSON")
          ->check(WritableOutputFile());
      cmd->add_option("--rate", o->rates, "Link rate, e.g. 10G 1G 100M 10M (repeatable). Default: those four");
      cmd->add_option("--rtt-ms", o->bench.rtt_ms, "Round-trip time of the link")
          ->check(CLI::Range(0.0, 10000.0))
          ->capture_default_str();
      cmd->add_option("--codec", o->bench.codecs, "raw, spec, dckv (repeatable). Default: all three");
      cmd->add_option("--tokens", o->bench.tokens, "Prefix tokens")->capture_default_str();
      cmd->add_option("--chunk-tokens", o->bench.chunk_tokens, "Tokens per chunk")
          ->check(CLI::Range(1u, 1u << 20))
          ->capture_default_str();
      cmd->add_option("--reps", o->bench.reps, "Restores per (rate, codec) at most")->capture_default_str();
      cmd->add_option("--max-cell-seconds", o->bench.max_cell_s,
                      "Wire-time budget per (rate, codec): fewer reps at slow rates")
          ->capture_default_str();
      cmd->add_option("--recompute-reps", o->bench.recompute_reps, "Prefills timed")->capture_default_str();
      cmd->add_option("--predictor-threads", o->bench.predictor_threads, "Spec predictor threads")
          ->capture_default_str();
      cmd->add_option("--model", o->bench.model, "Model file")->capture_default_str();
      cmd->add_option("--artifact-dir", o->bench.artifact_dir, "Codec artifact cache (the demo's)")
          ->capture_default_str();
      cmd->add_option("--server-bin", o->bench.server_bin, "kvstash-server binary (default: beside kvstash)");
      cmd->add_flag("--cleanup", o->cleanup, "Only remove namespaces left by crashed runs, then exit");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
