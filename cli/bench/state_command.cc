// `kvstash-bench state`: flags and table of the recurrent-state size bench
// (benchmarks/drivers/state_size_bench.h). Exit codes (the tool's): 0 ok, 1 the run
// failed (model or text file, a round trip, the --json file), 2 a bad argument.
#include <cstdio>
#include <iostream>

#include "benchmarks/drivers/state_size_bench.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"

namespace kvstash::cli {
namespace {

struct BenchStateOptions {
  std::string json;
  bench::StateBenchOptions bench;
};

int Run(const BenchStateOptions& o) {
  // The header goes out with the first row, so that a bad --model or --text prints only
  // its error.
  bool header_printed = false;
  auto print_row = [&header_printed](const nlohmann::json& p) {
    if (!header_printed) {
      std::printf("%9s  %-9s %8s %9s %9s %6s %9s %6s %10s %6s\n", "boundary", "part", "scalars", "raw_B",
                  "zstd_B", "ratio", "zshuf_B", "ratio", "bplane_B", "ratio");
      header_printed = true;
    }
    std::printf("%9u  %-9s %8llu %9llu %9llu %6.3f %9llu %6.3f %10.1f %6.3f\n",
                p["boundary_tokens"].get<uint32_t>(), p["part"].get<std::string>().c_str(),
                p["scalars"].get<unsigned long long>(), p["raw_bytes"].get<unsigned long long>(),
                p["zstd_bytes"].get<unsigned long long>(), p["zstd_ratio_vs_raw"].get<double>(),
                p["zstd_shuffled_bytes"].get<unsigned long long>(),
                p["zstd_shuffled_ratio_vs_raw"].get<double>(), p["byteplane_entropy_bytes"].get<double>(),
                p["byteplane_ratio_vs_raw"].get<double>());
  };
  auto result = bench::RunStateBench(o.bench, print_row);
  if (!result.ok()) {
    std::cerr << "kvstash-bench state: " << result.status().message() << "\n";
    return result.status().code() == Status::Code::kInvalidArgument ? 2 : 1;
  }
  const auto& j = result->summary;
  std::printf("model %s: %.3f bits/byte over %zu predicted bytes; %.0f tokens/s "
              "(1 thread); state round trips ok\n",
              o.bench.model.c_str(), j["bits_per_byte"].get<double>(), result->predicted_bytes,
              j["tokens_per_second"].get<double>());
  if (!o.json.empty() && !WriteJsonFile("bench state", o.json, j)) return 1;
  return 0;
}

const bool kRegistered = RegisterCommand(
    "state",
    "Recurrent-state size of the real RWKV-7 on real text: raw, zstd, byte-plane entropy",
    [](CLI::App* cmd) {
      auto o = std::make_shared<BenchStateOptions>();
      cmd->add_option("--model", o->bench.model, "rwkv.cpp RWKV-7 model file (FP32/FP16)")
          ->capture_default_str();
      cmd->add_option("--text", o->bench.text, "Text file, fed to the model byte by byte")
          ->capture_default_str();
      cmd->add_option("--boundaries", o->bench.boundaries,
                      "Comma-separated token counts at which to measure the state ('end' = "
                      "the whole text)")
          ->capture_default_str();
      cmd->add_option("--zstd-level", o->bench.zstd_level, "zstd compression level")
          ->capture_default_str();
      cmd->add_option("--json", o->json, "Write the rows to FILE as JSON")
          ->check(WritableOutputFile());
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
