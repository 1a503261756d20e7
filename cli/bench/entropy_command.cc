// `kvstash-bench entropy`: rANS vs ideal code length, zstd -19 and static Huffman on
// realistic symbol streams (benchmarks/drivers/entropy_bench.h), as a table on stdout and
// optionally as JSON rows {name, symbols, ideal_bits_per_symbol,
// actual_bits_per_symbol, overhead_pct, encode_mb_s, decode_mb_s} (null = not measured).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "benchmarks/drivers/entropy_bench.h"
#include "cli/bench/json_output.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"
#include "common/default_paths.h"

namespace kvstash::cli {
namespace {

struct BenchEntropyOptions {
  std::string json;
  std::string bf16_sample = DefaultBf16SamplePath();
  size_t symbols = 1000000;
  int repeats = 7;
  std::vector<int> precisions = {10, 12, 15};
  std::string filter;
};

nlohmann::json Optional(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

int Run(const BenchEntropyOptions& o) {
  bench::EntropyBenchOptions opts;
  opts.symbols = o.symbols;
  opts.repeats = o.repeats;
  opts.precisions = o.precisions;
  opts.bf16_sample_path = o.bf16_sample;
  opts.filter = o.filter;
  auto rows = bench::RunEntropyBench(opts);
  if (!rows.ok()) {
    std::cerr << "kvstash-bench entropy: " << rows.status().ToString() << "\n";
    return 1;
  }
  std::printf("%-42s %9s %8s %8s %9s %10s %10s\n", "name", "symbols", "ideal", "actual",
              "overhd%", "enc MB/s", "dec MB/s");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : *rows) {
    std::printf("%-42s %9llu %8.4f %8.4f %9.3f %10.1f %10.1f\n", r.name.c_str(),
                static_cast<unsigned long long>(r.symbols), r.ideal_bits_per_symbol,
                r.actual_bits_per_symbol, r.overhead_pct, r.encode_mb_s.value_or(0.0),
                r.decode_mb_s.value_or(0.0));
    out.push_back({{"name", r.name},
                   {"symbols", r.symbols},
                   {"ideal_bits_per_symbol", r.ideal_bits_per_symbol},
                   {"actual_bits_per_symbol", r.actual_bits_per_symbol},
                   {"overhead_pct", r.overhead_pct},
                   {"encode_mb_s", Optional(r.encode_mb_s)},
                   {"decode_mb_s", Optional(r.decode_mb_s)}});
  }
  if (!bench::HtscodecsBuiltIn()) {
    std::printf("SKIPPED: htscodecs rows (this build has no libhtscodecs-dev; scripts/setup.sh installs it)\n");
  }
  if (!o.json.empty() && !WriteJsonFile("bench entropy", o.json, out)) return 1;
  return 0;
}

const bool kRegistered = RegisterCommand(
    "entropy", "Benchmark rANS coding on realistic symbol streams (vs zstd -19, Huffman)",
    [](CLI::App* cmd) {
      auto o = std::make_shared<BenchEntropyOptions>();
      cmd->add_option("--json", o->json, "Write the rows to FILE as JSON")
          ->check(WritableOutputFile());
      cmd->add_option("--bf16-sample", o->bf16_sample,
                      "Little-endian bf16 values of a real model ('' to skip)")
          ->capture_default_str();
      cmd->add_option("--symbols", o->symbols, "Symbols per synthetic stream")
          ->capture_default_str();
      cmd->add_option("--repeats", o->repeats, "Timed runs per measurement (median)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000));
      cmd->add_option("--precisions", o->precisions, "Probability precisions P (10..15)")
          ->capture_default_str()
          ->check(CLI::Range(10, 15));
      cmd->add_option("--filter", o->filter, "Only streams whose name contains this");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
