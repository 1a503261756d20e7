// kvstash::RestoreCostModel: whether restoring a matched prefix from the store is
// faster than letting the engine prefill it again, decided per request from rates
// measured on this machine (docs/architecture.md §9, "A hit is taken only when it pays").
//
// READ ME FIRST
// - The estimate, for `tokens` matched tokens:
//     restore_s   = tokens * bytes_per_token * link_s_per_byte     (GET of the payloads)
//                 + tokens * decode_s_per_token                    (verify + decode, the
//                   spec predictor included, + import into the engine)
//     recompute_s = tokens * prefill_s_per_token                   (the engine's own prefill)
//   The tokens after the match are prefilled either way, so they are left out of both
//   (recompute_s may count fewer tokens than restore_s: see the two-count Estimate).
// - Every rate is the median of the last `window` samples the engine reported:
//   ObservePrefill from its own prefills (misses and declined hits), ObserveRestore from
//   the loads it took, ObserveEncode from its saves. A save runs the same predictor and
//   an entropy coder of the same cost as the load, so until a load has been measured
//   the encode rate stands in for the decode rate. Until a transfer has been measured
//   the link is options.link_bytes_per_s.
// - A hit is taken when restore_s * margin < recompute_s. Until the model has a prefill
//   sample and a decode (or encode) sample it cannot compare, and declines: a declined
//   hit costs exactly a miss, a restore of unknown cost may cost several. The prefill it
//   then runs is its first prefill sample; engines that only load (no saves) feed an
//   encode sample from a probe when they start (the vLLM connector does).
//   policy kAlways takes every hit and still estimates.
// - Units: seconds, bytes, tokens. Samples with zero tokens, or a negative or
//   non-finite time, are ignored; a sample with zero bytes still gives its decode or
//   encode rate (only its link and bytes-per-token parts are skipped).
// - REQUIRES (not checked here; the Python binding checks them): window >= 1,
//   link_bytes_per_s > 0 and margin > 0, both finite.
//
// Thread-safety: all members are safe to call concurrently (one internal std::mutex;
// this public header stays free of the project's internal annotation macros).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string_view>

#include "kvstash/status.h"

namespace kvstash {

struct RestoreCostOptions {
  enum class Policy : uint8_t { kCost, kAlways };
  // kCost: decline a hit whose restore is estimated slower than its recompute.
  // kAlways: take every hit (tests that must exercise the load path). Default: kCost.
  Policy policy = Policy::kCost;
  // Samples kept per rate (median of these). Default: 8.
  uint32_t window = 8;
  // Prefills shorter than this are not rate samples (fixed costs dominate them).
  // Default: 64 tokens.
  uint64_t min_prefill_tokens = 64;
  // Link speed assumed until a transfer is measured, bytes/s. Default: 125e6 (1 Gbit/s).
  double link_bytes_per_s = 125e6;
  // Safety factor on the restore estimate (take when restore_s * margin < recompute_s).
  // Default: 1.0.
  double margin = 1.0;
};

// OK, or InvalidArgument naming the first bad field: window 0, link_bytes_per_s or
// margin not a finite number > 0, or a policy outside the enum. The engines call it on
// their options (LlamaSession::Create, the Python RestoreCostModel), so a bad setting is
// an error at start-up, never a model that silently takes or declines every hit.
Status ValidateRestoreCostOptions(const RestoreCostOptions& options);

// "cost" or "always" (nullptr-free; the names the engines' options use).
std::string_view RestorePolicyName(RestoreCostOptions::Policy policy);
// Parses "cost" / "always"; false for anything else.
bool ParseRestorePolicy(std::string_view name, RestoreCostOptions::Policy* out);

// The model's answer for one matched prefix.
struct RestoreEstimate {
  uint64_t tokens = 0;       // matched tokens the restore decodes
  double restore_s = 0;      // transfer_s + decode_s
  double transfer_s = 0;     //   GET of the payloads over the measured (or assumed) link
  double decode_s = 0;       //   verify, decode (predictor included) and import
  double recompute_s = 0;    // the engine's prefill of the same tokens
  uint64_t recompute_tokens = 0;  // tokens the engine would prefill instead
  bool informed = false;     // a prefill rate and a decode (or encode) rate were known
  bool decode_from_encode = false;  // the decode rate is the encode proxy (no load seen)
  bool take = false;         // restore (true) or recompute (false)
};

// The medians the estimate uses (0 where no sample exists yet).
struct RestoreRates {
  double prefill_s_per_token = 0;
  double decode_s_per_token = 0;   // from loads
  double encode_s_per_token = 0;   // from saves (the proxy)
  double link_s_per_byte = 0;      // from loads' transfers
  double bytes_per_token = 0;      // stored payload bytes per token (loads or saves)
  uint32_t prefill_samples = 0, decode_samples = 0, encode_samples = 0, link_samples = 0;
};

class RestoreCostModel {
 public:
  explicit RestoreCostModel(RestoreCostOptions options = {});

  // The engine prefilled `tokens` tokens in `seconds` (a miss, or a declined hit).
  void ObservePrefill(uint64_t tokens, double seconds);
  // A load the engine took: `bytes` of payloads arrived in `transfer_s`, then `tokens`
  // tokens were verified, decoded and imported in `decode_s`.
  void ObserveRestore(uint64_t tokens, uint64_t bytes, double transfer_s, double decode_s);
  // A save: `tokens` tokens encoded (predictor included) to `bytes` bytes in `seconds`.
  void ObserveEncode(uint64_t tokens, uint64_t bytes, double seconds);

  // The estimate for restoring `tokens` matched tokens, and the decision.
  RestoreEstimate Estimate(uint64_t tokens) const { return Estimate(tokens, tokens); }
  // As above when the restore decodes `restore_tokens` tokens but saves the engine only
  // `recompute_tokens` (vLLM: chunks that also hold tokens of its own prefix cache).
  RestoreEstimate Estimate(uint64_t restore_tokens, uint64_t recompute_tokens) const;
  RestoreRates rates() const;
  const RestoreCostOptions& options() const { return options_; }

 private:
  void Push(std::deque<double>* samples, double value);

  const RestoreCostOptions options_;
  mutable std::mutex mu_;
  std::deque<double> prefill_, decode_, encode_, link_, bytes_per_token_;
};

}  // namespace kvstash
