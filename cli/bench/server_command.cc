// `kvstash-bench server`: flags of the server benchmark (benchmarks/drivers/server_bench.h);
// prints one JSON row per (system, op) and whether every GET round-tripped.
#include <iostream>

#include "benchmarks/drivers/server_bench.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"

namespace kvstash::cli {
namespace {

struct Options {
  std::string json_file;
  bench::ServerBenchOptions bench;
};

int Run(const Options& o) {
  auto result = bench::RunServerBench(o.bench, std::cerr);
  if (!result.ok()) {
    std::cerr << "kvstash-bench server: " << result.status().message() << "\n";
    return 1;
  }
  for (const auto& j : result->rows) std::cout << j.dump() << "\n";
  std::cout << (result->mismatches == 0 ? "round trip ok: every GET returned the stored bytes\n"
                                        : "ROUND TRIP MISMATCH: " + std::to_string(result->mismatches) + " GETs\n");
  if (!o.json_file.empty() && !WriteJsonFile("bench server", o.json_file, result->rows)) return 1;
  return result->mismatches == 0 ? 0 : 1;
}

const bool kRegistered = RegisterCommand(
    "server",
    "Throughput/latency of kvstash-server vs a redis-server baseline (Zipf prefix popularity)",
    [](CLI::App* cmd) {
      auto o = std::make_shared<Options>();
      cmd->add_option("--json", o->json_file, "Write rows to FILE as JSON")
          ->check(WritableOutputFile());
      cmd->add_option("--clients", o->bench.clients, "Concurrent clients")->capture_default_str();
      cmd->add_option("--prefixes", o->bench.prefixes, "Stored prefixes")->capture_default_str();
      cmd->add_option("--chunks", o->bench.chunks, "Chunks per prefix")->capture_default_str();
      cmd->add_option("--chunk-tokens", o->bench.chunk_tokens, "Tokens per chunk")->capture_default_str();
      cmd->add_option("--zipf", o->bench.zipf_s, "Zipf exponent of prefix popularity")->capture_default_str();
      cmd->add_option("--seconds", o->bench.seconds, "Seconds per phase")->capture_default_str();
      cmd->add_option("--server", o->bench.server, "Use a running kvstash server (tenant bench)");
      cmd->add_option("--server-bin", o->bench.server_bin, "kvstash-server binary");
      cmd->add_option("--redis-bin", o->bench.redis_bin, "redis-server binary")->capture_default_str();
      cmd->add_option("--data", o->bench.data_file, "Real bf16 bytes to fill payloads with");
      cmd->add_option("--lookup-rate", o->bench.lookup_rate,
                      "Open-loop LOOKUPs per second per client (0: skip that phase)")
          ->capture_default_str();
      cmd->add_flag("--skip-redis", o->bench.skip_redis, "No redis baseline");
      cmd->add_option("--lookup-driver", o->bench.lookup_driver,
                      "Closed-loop LOOKUP clients: async (callbacks) or threads (sync calls)")
          ->capture_default_str()
          ->check(CLI::IsMember({"async", "threads"}));
      cmd->add_option("--ops", o->bench.ops, "Phases to run: lookup, get, put (default: all)")
          ->delimiter(',')
          ->check(CLI::IsMember({"lookup", "get", "put"}));
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
