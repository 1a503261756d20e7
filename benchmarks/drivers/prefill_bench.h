// Prefill throughput (`kvstash-bench prefill`) of the reference runtime (model/) on
// real text, at several prompt lengths. Each row: tokens, BLAS threads, median
// seconds and tokens/s over --reps runs, and the process's peak RSS. The forward pass
// exports the full KV cache (and the last row of logits), as a cache producer does.
//
// --predictor also runs the spec codec's deterministic predictor (model/predictor/spec_predictor.h,
// --predictor-group / --predictor-activation-bits, as many threads as BLAS) on the same
// tokens, alternating with the prefill runs so both see the same machine load, and adds
// its median seconds, tokens/s and cost = predictor median / prefill median (the figure
// that decides whether a spec hit beats recomputing), and the same ratio in process
// CPU seconds (robust to other load; use --threads 1). --profile adds the predictor's
// per-step split (quantise, int GEMM, attention, norm + RoPE, other) of the median run.
//
// Errors: the model's load errors; IOError for an unreadable text; InvalidArgument for a
// model without tokenizer or a length of 0 or beyond the text's tokens.
// Thread-safety: one run at a time (sets the BLAS thread count).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/default_paths.h"
#include "kvstash/result.h"

namespace kvstash::bench {

struct PrefillBenchOptions {
  std::string model = DefaultModelPath();                // model file
  std::string text = "/usr/share/common-licenses/GPL-3";  // UTF-8 text of the prompts
  std::vector<uint32_t> lengths = {128, 512, 2048};      // prompt lengths (tokens)
  int reps = 3, threads = 0;     // runs per length (median); BLAS threads (0: default)
  bool predictor = false, profile = false;  // time the spec predictor too; its split
  int predictor_group = 128, predictor_activation_bits = 16;
  bool predictor_int8_attention = false;  // the "-attn8" predictor variant
};

// Progress as the bench runs (either may be empty).
struct PrefillBenchObserver {
  // Model config text, prompt text tokens, predictor variant ("" without --predictor),
  // BLAS threads.
  std::function<void(const std::string& model, size_t text_tokens, const std::string& predictor,
                     int threads)> on_start;
  // One row as it is measured (the fields of the returned rows).
  std::function<void(const nlohmann::json& row)> on_row;
};

// Rows: model, tokens, threads, reps, median_s, tokens_per_s, peak_rss_mib,
// kv_bytes_bf16; with predictor: predictor, predictor_median_s, predictor_tokens_per_s,
// predictor_cost_vs_prefill, cpu_median_s, predictor_cpu_median_s,
// predictor_cpu_cost_vs_prefill, and with profile predictor_profile_s.
Result<nlohmann::json> RunPrefillBench(const PrefillBenchOptions& options,
                                       const PrefillBenchObserver& observer = {});

}  // namespace kvstash::bench
