// Command-line options shared by `kvstash-bench codec` and `kvstash calibrate spec`.
// Thread-safety: call while building the command line (main thread).
#pragma once

#include <CLI/CLI.hpp>

#include "benchmarks/drivers/spec_bench.h"

namespace kvstash::cli {

// Adds --model, --cal-tokens, --doc-tokens, --chunk-tokens, --threads,
// --predictor-group, --predictor-activation-bits, --predictor (int | ggml),
// --predictor-kv-dtype and --predictor-attention (fp32 | int8) to `cmd`, bound to `o`.
void AddSpecRunOptions(CLI::App* cmd, bench::SpecBenchOptions* o);

}  // namespace kvstash::cli
