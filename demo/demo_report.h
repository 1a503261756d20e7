// The table and JSON of `kvstash demo`: one row per codec (raw bf16 first, the
// no-compression baseline), with the acceptance verdicts (token hit rate > 50%, hit
// TTFT below miss TTFT, no mismatched hit).
//
// JSON: {"rows": [{codec, requests, hits, misses, token_hit_rate, raw_bytes,
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

#include "demo/demo_runner.h"

namespace kvstash::demo {

nlohmann::json DemoRowJson(const DemoCodecRow& row);

// {"token_hit_rate_over_50": bool, "hit_ttft_below_miss": bool, "no_mismatch": bool,
//  "passed": bool} over all rows.
nlohmann::json DemoAcceptance(const std::vector<DemoCodecRow>& rows);

// Human-readable tables (summary and hit time breakdown).
std::string DemoTable(const std::vector<DemoCodecRow>& rows);

}  // namespace kvstash::demo
