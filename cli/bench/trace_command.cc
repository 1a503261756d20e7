// `kvstash-bench trace --json FILE`: flags and table of the trace replay benchmark
// (benchmarks/drivers/trace_bench.h): token hit rate against budget per codec and
// eviction policy on the Mooncake traces, next to a plain LRU simulation.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "benchmarks/drivers/trace_bench.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"

namespace kvstash::cli {
namespace {

struct BenchTraceOptions {
  std::string json;
  bench::TraceBenchOptions bench;
};

// Rows of one (trace, codec, budget) side by side; acceptance: lfu_decay no worse than
// lru_sim within 0.5 points.
int Run(const BenchTraceOptions& o) {
  auto res = bench::RunTraceBench(o.bench);
  if (!res.ok()) {
    std::cerr << "kvstash-bench trace: " << res.status().ToString() << "\n";
    return 1;
  }
  const nlohmann::json setup = nlohmann::json::parse(res->setup_json);
  std::printf("model %s: %s = %.0f bytes/token bf16; codec figures:\n",
              setup["model"].get<std::string>().c_str(),
              setup["model_kv"].get<std::string>().c_str(),
              setup["raw_bytes_per_token"].get<double>());
  for (const auto& c : setup["codecs"]) {
    std::printf("  %-9s %8.4f of bf16 = %9.1f bytes/token  (%s)\n",
                c["name"].get<std::string>().c_str(), c["fraction_of_bf16"].get<double>(),
                c["bytes_per_token"].get<double>(), c["source"].get<std::string>().c_str());
  }
  std::printf("budget: %s\n", setup["budget_split"].get<std::string>().c_str());

  struct Cell {
    double lfu = -1, lru = -1, sim = -1, lfu_rps = 0, lru_rps = 0;
    uint64_t failures = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Cell> cells;
  for (const auto& r : res->rows) {
    char key[160];
    std::snprintf(key, sizeof(key), "%-34s %-9s %5.1f%%", r.trace.c_str(), r.codec.c_str(),
                  100 * r.budget_fraction);
    if (!cells.count(key)) order.push_back(key);
    Cell& c = cells[key];
    const double pct = 100 * r.token_hit_rate;
    if (r.policy == "lfu_decay") {
      c.lfu = pct;
      c.lfu_rps = r.requests_per_s;
    } else if (r.policy == "lru") {
      c.lru = pct;
      c.lru_rps = r.requests_per_s;
    } else {
      c.sim = pct;
    }
    c.failures += r.put_failures;
  }
  std::printf("\n%-34s %-9s %6s %10s %8s %8s %8s %9s %9s\n", "trace", "codec", "budget",
              "lfu_decay%", "lru%", "lru_sim%", "lfu-sim", "lfu req/s", "lru req/s");
  double worst = 1e9;
  std::string worst_key;
  for (const auto& k : order) {
    const Cell& c = cells[k];
    std::printf("%s %10.2f %8.2f %8.2f %+8.2f %9.0f %9.0f%s\n", k.c_str(), c.lfu, c.lru, c.sim,
                c.lfu - c.sim, c.lfu_rps, c.lru_rps,
                c.failures ? "  (puts refused)" : "");
    if (c.lfu - c.sim < worst) {
      worst = c.lfu - c.sim;
      worst_key = k;
    }
  }
  if (!order.empty()) {
    std::printf("\nacceptance (lfu_decay >= lru_sim - 0.5 points everywhere): %s; worst "
                "lfu-sim %+.2f points at %s\n",
                worst >= -0.5 ? "PASS" : "FAIL", worst, worst_key.c_str());
  }
  if (!o.json.empty()) {
    nlohmann::json j;
    j["setup"] = setup;
    j["setup"]["run"] = "kvstash-bench trace --json FILE";
    for (const auto& r : res->rows) {
      j["rows"].push_back({{"trace", r.trace},
                           {"codec", r.codec},
                           {"policy", r.policy},
                           {"budget_fraction", r.budget_fraction},
                           {"budget_bytes_scaled", r.budget_bytes},
                           {"bytes_per_token", r.bytes_per_token},
                           {"requests", r.requests},
                           {"input_tokens", r.input_tokens},
                           {"hit_tokens", r.hit_tokens},
                           {"token_hit_rate", r.token_hit_rate},
                           {"put_failures", r.put_failures},
                           {"evictions", r.evictions},
                           {"seconds", r.seconds},
                           {"requests_per_s", r.requests_per_s}});
    }
    if (!WriteJsonFile("bench trace", o.json, j)) return 1;
  }
  return 0;
}

const bool kRegistered = RegisterCommand(
    "trace",
    "Replay the Mooncake traces: token hit rate vs budget per codec and eviction policy",
    [](CLI::App* cmd) {
      auto o = std::make_shared<BenchTraceOptions>();
      cmd->add_option("--json", o->json, "Write {setup, rows} to FILE as JSON")
          ->check(WritableOutputFile());
      cmd->add_option("--trace", o->bench.traces,
                      "Trace file (JSONL; repeatable). Default: ../shared/traces/*.jsonl");
      cmd->add_option("--results", o->bench.results_dir,
                      "Folder of the committed codec results (default: benchmarks/results)");
      cmd->add_option("--codec", o->bench.codecs,
                      "Codec to run (raw, spec, dckv-r8 ... dckv-r64; repeatable). Default: all");
      cmd->add_option("--budget", o->bench.budgets,
                      "Budget as a fraction of the distinct blocks at raw size (repeatable)")
          ->capture_default_str();
      cmd->add_option("--scale", o->bench.byte_scale, "Divide every byte size by this")
          ->capture_default_str();
      cmd->add_option("--tiers", o->bench.tiers, "t0 (budget on T0) or t0t1 (on T1, RocksDB)")
          ->capture_default_str();
      cmd->add_option("--t0-share", o->bench.t0_share, "With t0t1: T0 cache as a share of T1")
          ->capture_default_str();
      cmd->add_option("--dir", o->bench.dir, "Scratch directory for RocksDB (default: temp)");
      cmd->add_option("--requests", o->bench.max_requests,
                      "Replay only the first N requests of each trace (0: all)")
          ->capture_default_str();
      cmd->add_option("--eviction-samples", o->bench.eviction_samples,
                      "Store eviction_samples (investigation; results use the default)")
          ->capture_default_str();
      cmd->add_option("--lfu-decay-accesses", o->bench.lfu_decay_accesses,
                      "Store lfu_decay_accesses (investigation; results use the default)")
          ->capture_default_str();
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
