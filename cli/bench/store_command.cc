// `kvstash-bench store --json FILE`: flags and table of the store benchmark
// (benchmarks/drivers/store_table_bench.h).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "benchmarks/drivers/store_table_bench.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"

namespace kvstash::cli {
namespace {

struct BenchStoreOptions {
  std::string json;
  bench::StoreTableBenchOptions bench;
};

int Run(const BenchStoreOptions& o) {
  auto rows = bench::RunStoreTableBench(o.bench);
  if (!rows.ok()) {
    std::cerr << "kvstash-bench store: " << rows.status().ToString() << "\n";
    return 1;
  }
  if (o.bench.redis.empty()) std::cerr << "(T2 rows skipped: pass --redis HOST:PORT)\n";
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : *rows) {
    std::printf("%-32s %12.3f %s\n", r.name.c_str(), r.value, r.unit.c_str());
    j.push_back({{"name", r.name}, {"value", r.value}, {"unit", r.unit}});
  }
  if (!o.json.empty() && !WriteJsonFile("bench store", o.json, j)) return 1;
  return 0;
}

const bool kRegistered = RegisterCommand(
    "store", "Benchmark the store: key hashing, Lookup latency, tier MB/s, index memory",
    [](CLI::App* cmd) {
      auto o = std::make_shared<BenchStoreOptions>();
      cmd->add_option("--json", o->json, "Write rows (name, value, unit) to FILE as JSON")
          ->check(WritableOutputFile());
      cmd->add_option("--dir", o->bench.dir, "Scratch directory for RocksDB (default: temp)");
      cmd->add_option("--redis", o->bench.redis, "Redis HOST:PORT for the T2 rows");
      cmd->add_option("--chunks", o->bench.chunks, "2.4 MB chunks per throughput run")
          ->capture_default_str();
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
