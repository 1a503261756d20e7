// The request loop of `kvstash-demo`: one pass over the workload per codec against a
// live kvstash server, with every hit checked against an exact reference.
//
// Reference results (the exact fp32 prefix cache of each document and the answers a
// hit is checked against) are computed when a codec pass first needs them and are
// shared by the later passes; that work is never part of a TTFT:
//   - a document's exact cache is the first |prefix| tokens of the cache of its first
//     miss's full prefill (system prompt + document + question, one batch), or of a
//     full prefill run for the check when the document's first request is a partial hit;
//   - a request's `fp32` reference: the exact fp32 prefix cache, the question
//     prefilled, greedy decoding (= a full prefill up to fp32 rounding of differently
//     shaped GEMMs), with the log-softmax of each generated position (dckv's KL
//     reference). Its `bf16` reference (the same from the bf16-rounded exact cache: what
//     an engine with a bf16 KV cache computes without kvstash) is computed only when a
//     lossless hit's answer differs from the fp32 one (bf16 rounding can flip a
//     near-tie), to decide whether the hit is still exact.
// Codec pass (per codec, fresh namespace: the cache salt includes the run id and the
// codec, so a RocksDB left from an earlier run never serves this run): the engine
// session's pass (demo_session_pass.h) over the reference runtime
// (engines/reference/reference_engine.h, bf16 KV across the interface), with a fresh
// restore cost model per pass. Its checks:
//   miss (or declined hit): the document's exact cache is the prefix of this prefill's
//     cache when none is kept yet.
//   hit: raw/spec: the restored bf16 chunks byte-identical to the exact cache's and the
//     greedy answer identical to the fp32 reference or, failing that, to the bf16 one
//     (hits_verified, else hits_mismatched); `same_tokens_as_fp32` counts answers equal
//     to the fp32 reference. dckv: decode checks pass (content checksum of the decoded
//     chunk, verified by the decoder) = verified; the fp32 reference answer is teacher-
//     forced and top-1 agreement and KL(p_fp32 || p_dckv) are measured per generated
//     position. A failed restore is a mismatch, never silently used.
// Thread-safety: not reentrant.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "demo/demo_workload.h"
#include "kvstash/client.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/restore_cost.h"
#include "model/forward/kv_cache.h"
#include "model/forward/model.h"

namespace kvstash::demo {

// Timing helpers shared by the demo passes (SmolLM2 and hybrid).
using Clock = std::chrono::steady_clock;
// Milliseconds from a to b.
double Ms(Clock::time_point a, Clock::time_point b);
// Seconds from a to now.
double Secs(Clock::time_point a);
// GETs chunks [0, n) of the chain `keys` (routed by keys[0]), pipelined, and returns
// their payloads in chain order once all have arrived. Errors: the first failed GET's.
Result<std::vector<std::vector<uint8_t>>> GetChainPayloads(Client* client, std::span<const ChunkKey> keys, uint32_t n);
// Prints "<command>: <what>: <status>" to stderr, then, when the server the demo started
// has died, a line saying so (StartedServerExitNote), and returns exit code 1.
int Fail(const std::string& command, const std::string& what, const Status& s);
// Median of v; 0 when empty, the mean of the two middle values for an even size.
double Median(std::vector<double> v);
// out[i] = log-softmax(logits)[i] (double accumulation); out has logits.size() floats.
void LogSoftmax(std::span<const float> logits, float* out);
// Scores one teacher-forced position of a lossy hit against the reference: adds 1 to
// *top1 when argmax(logits) == ref_token, and KL(p_ref || softmax(logits)) in nats to *kl.
// ref_logprobs: the reference's log-softmax at that position (logits.size() floats).
void ScorePosition(std::span<const float> logits, const float* ref_logprobs, uint32_t ref_token,
                   double* top1, double* kl);

struct DemoRunOptions {
  uint32_t gen_tokens = 8;  // tokens generated per request. Default: 8.
  bool verbose = true;      // one progress line per request on stderr
  // Which LOOKUP hits are restored (kvstash/restore_cost.h): kCost declines a hit whose
  // restore is estimated slower than recomputing it (it then runs as a miss, without a
  // PUT); kAlways restores every hit. Each codec pass has its own model, fed by the
  // pass's prefills, encodes and restores. Default: kCost.
  RestoreCostOptions::Policy restore_policy = RestoreCostOptions::Policy::kCost;
};

// Reference results shared by the codec passes, filled as they are needed (see the top).
struct DemoReference {
  struct Doc {
    bool ready = false;       // `exact` computed
    model::KvCache exact;     // exact fp32 cache of the prefix
  };
  struct Request {
    std::vector<uint32_t> fp32_tokens;  // empty until a hit needs it
    std::vector<float> fp32_logprobs;   // [gen_tokens, vocab]
    std::vector<uint32_t> bf16_tokens;  // empty until a codec pass needs it
  };
  std::vector<Doc> docs;
  std::vector<Request> requests;
  double wall_s = 0;  // seconds spent computing reference results (outside every TTFT)
};

// Time of one hit, milliseconds: the median of each part over the hits.
struct DemoHitBreakdown {
  double lookup = 0, network = 0, store = 0, predictor = 0, decode = 0, suffix_prefill = 0;
};

// One LOOKUP hit's restore estimate next to what was measured (milliseconds).
// Taken hits: measured_ms is the restore (GET + predictor + decode + import, the LOOKUP
// excluded), the estimate's restore_s its forecast. Declined hits: measured_ms is the
// prefill of the whole prompt scaled to the matched tokens (prefill_ms * matched /
// prompt), the estimate's recompute_s its forecast.
struct DemoHitEstimate {
  uint32_t request = 0;          // 1-based, as in the progress lines
  bool taken = true;
  RestoreEstimate estimate;
  double measured_ms = 0;
  // |forecast - measured| / measured of the part that ran; -1 when the model was not
  // informed (its first hits, before a rate was measured).
  double error() const;
};

struct DemoCodecRow {
  std::string codec;
  uint32_t requests = 0, hits = 0, misses = 0;
  // LOOKUP hits the cost model declined: recomputed like misses (counted apart from
  // both), with their prefix tokens in declined_tokens.
  uint32_t declined = 0;
  uint64_t declined_tokens = 0;
  std::vector<DemoHitEstimate> estimates;  // every LOOKUP hit, taken or declined
  double ttft_declined_ms = 0;              // median TTFT of the declined hits
  uint32_t hits_slower_than_miss = 0;       // taken hits whose TTFT > ttft_miss_ms
  uint64_t prompt_tokens = 0, matched_tokens = 0;
  uint64_t raw_bytes = 0, stored_bytes = 0;  // chunks PUT: bf16 bytes vs payload bytes
  double ttft_miss_ms = 0, ttft_hit_ms = 0;  // medians
  double encode_ms = 0, put_ms = 0;          // per miss (mean), after the first token
  DemoHitBreakdown hit;                      // medians over hits
  uint32_t hits_verified = 0, hits_mismatched = 0;
  uint32_t same_tokens_as_fp32 = 0;          // raw/spec hits whose answer equals the reference's
  std::string reference = "fp32 full prefill";  // what hits are checked against
  uint32_t scored_positions = 0;             // dckv
  double top1_agreement = -1, kl_mean = -1;  // dckv; -1 = not measured
  double wall_s = 0;
  // Restored tokens / prompt tokens.
  double token_hit_rate() const { return prompt_tokens ? double(matched_tokens) / prompt_tokens : 0; }
  // Tokens the store held (restored or declined) / prompt tokens.
  double lookup_hit_rate() const {
    return prompt_tokens ? double(matched_tokens + declined_tokens) / prompt_tokens : 0;
  }
  // Declined / LOOKUP hits (0 when there was none).
  double declined_share() const { return hits + declined ? double(declined) / (hits + declined) : 0; }
  // Median error() of the informed estimates (-1 when there is none).
  double median_estimate_error() const;
  double ratio() const { return stored_bytes ? double(raw_bytes) / stored_bytes : 0; }
};

// What a codec pass gathers besides its row: the TTFTs (milliseconds) of its misses,
// taken hits and declined hits, and dckv's sums over the scored positions.
struct DemoPassTally {
  std::vector<double> ttft_miss, ttft_hit, ttft_declined;
  double top1 = 0, kl = 0;  // top-1 agreements; KL in nats

  // Sets row->ttft_miss_ms, ttft_hit_ms, ttft_declined_ms (medians of the lists, ms) and
  // hits_slower_than_miss (taken hits above the miss median); for a lossy codec with
  // scored positions, row->top1_agreement and kl_mean (means over them).
  void Finish(bool lossy, DemoCodecRow* row) const;
  // The medians so far, for the end of a progress line: " | so far: hits 812 ms (n=3),
  // misses 1930 ms (n=2)" (a list still empty is left out; "" when both are).
  std::string SoFar() const;
};

// One progress-line fragment for a hit's decision: "restore est 812 ms < recompute est
// 1930 ms" (or ">=", or "no rates yet: declined"; the margin is not shown).
std::string DecisionText(const RestoreEstimate& e);

// Fills *reference (sized to the workload on first use) as it needs reference results.
// `codec` must be bf16 (the reference's KV dtype across the engine interface).
// Errors: InvalidArgument for gen_tokens 0; the session's and the runtime's errors.
Result<DemoCodecRow> RunDemoCodec(const model::Model& model, const DemoWorkload& workload,
                                  DemoReference* reference, std::shared_ptr<const PrefixCodec> codec,
                                  std::shared_ptr<Client> client, const DemoRunOptions& options);

}  // namespace kvstash::demo
