// The table and JSON of `kvstash-demo`: one row per codec (raw bf16 first, the
// no-compression baseline), with the acceptance verdicts (token hit rate > 50%, hit
// TTFT below miss TTFT, no mismatched hit).
//
// JSON: {"rows": [{codec, requests, hits (taken), misses, token_hit_rate (restored
// tokens / prompt tokens), lookup_hit_rate (+ declined tokens), declined,
// declined_tokens, declined_share, ttft_declined_ms, hits_slower_than_miss,
// median_estimate_error, estimates: [{request, taken, informed, tokens,
// restore_est_ms, recompute_est_ms, decode_rate_from_encode, measured_ms, error}], raw_bytes,
// stored_bytes, ratio, ttft_miss_ms, ttft_hit_ms, hits_verified, hits_mismatched,
// same_tokens_as_fp32 (answers equal to the reference's), reference,
// top1_agreement, kl_mean, scored_positions, encode_ms_per_miss,
// put_ms_per_miss, hit_breakdown_ms: {lookup, network, store, predictor, decode,
// suffix_prefill}, wall_s}], "setup": {...}, "acceptance": {...}}.
// top1_agreement and kl_mean are null for lossless codecs.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo/demo.h"
#include "demo/demo_runner.h"

namespace kvstash::demo {

nlohmann::json DemoRowJson(const DemoCodecRow& row);

// {"token_hit_rate_over_50": bool, "hit_ttft_below_miss": bool, "no_mismatch": bool,
//  "passed": bool} over all rows. The hit rate counts declined hits' tokens (the store
// held them); a row's TTFT check holds when its taken hits' median beats its misses',
// or when the cost model declined every hit it saw.
// Rows whose codec is in ttft_exempt are left out of the TTFT verdict (all rows count
// when that leaves none); with an exemption the result also has
// "hit_ttft_below_miss_codecs": the codecs checked, ", "-separated, or "all".
nlohmann::json DemoAcceptance(const std::vector<DemoCodecRow>& rows,
                              const std::vector<std::string>& ttft_exempt = {});

// Human-readable tables (summary and hit time breakdown).
std::string DemoTable(const std::vector<DemoCodecRow>& rows);

// What a run's "setup" object reports besides the options (both engines).
struct DemoRunFacts {
  std::string model_sha256;     // hex
  uint64_t requests = 0, prompt_tokens = 0;
  double calibration_s = 0, reference_s = 0, wall_s = 0;
  std::string run_id, predictor;  // predictor: its variant name, "" without spec
  std::vector<std::string> sources;  // the workload's documents
};

// Writes {"rows", "acceptance", "setup"} to options.json, plus `extra`'s keys at the top
// level; "setup" holds the options, `facts` and `engine_setup`'s keys (engine, kv_dtype,
// engine parameters). Errors: IOError when the file cannot be written.
Status WriteDemoJson(const DemoOptions& options, const std::vector<DemoCodecRow>& rows,
                     const nlohmann::json& acceptance, const DemoRunFacts& facts,
                     const nlohmann::json& engine_setup, const nlohmann::json& extra);

}  // namespace kvstash::demo
