// The request loop of `kvstash-demo --model-kind hybrid`: the main-job workload
// (demo/demo_workload.h) on a Qwen3.5-style hybrid model (model/hybrid), whose
// reusable prefix is the attention layers' KV PLUS the linear layers' recurrent state
// (conv and delta-rule states), against a live kvstash server.
//
// Reference pass (once, shared by all codecs): every request's prompt (document prefix
// + question) is evaluated in full from the empty state with the logits of EVERY
// position kept; its wall time (+ the argmax of the last row) is that request's miss
// TTFT, and greedy decoding gives the reference answer. For each document the exact
// state after the prefix is kept, and the exact recurrent state at every boundary
// where the codec pass stores one (every `state_every` chunks and the prefix end).
//
// Codec pass (per codec, fresh namespace: the cache salt holds the run id):
//   LOOKUP the prefix chain with require_state (the longest stored prefix that ends at
//   a boundary carrying a state).
//   miss: TTFT = lookup + the reference full prefill; then the chunks the server lacks
//     are encoded (HybridKvCoder) and PUT in chain order, each chunk that ends at a
//     state boundary with its state record (not part of TTFT).
//   hit (m chunks, b tokens): GET the m chunks pipelined, the last with its state
//     record; restore = decode the KV payloads + decode the record
//     (hybrid::ImportState); suffix = prefix[b:] + question evaluated; TTFT ends with
//     the first token. EVERY hit is checked, outside the timed part:
//       - the restored KV of tokens [0, b) is byte-identical to the exact fp32 KV;
//       - the restored recurrent state is byte-identical to the exact state at b;
//       - the logits of every suffix position are bit-identical to the full prefill's
//         rows b.. (the continuation equals the full prefill), and the greedy answer
//         equals the reference answer.
//     Lossy KV (dckv): the restored state must still be byte-exact (verified); the KV
//     and logits are not, so every continuation row is scored instead: top-1 agreement
//     and KL(p_full || p_restored) against the full prefill's row.
//     A restore that fails (corrupt payload or state record, wrong model) counts as a
//     mismatched hit and the request is served as a miss; never silently used.
//
// Thread-safety: not reentrant.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/dckv/dckv_codec.h"
#include "codec/spec/spec_state_artifact.h"
#include "demo/demo_runner.h"
#include "demo/demo_workload.h"
#include "kvstash/client.h"
#include "kvstash/kv_chunk.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_predictor.h"

namespace kvstash::demo {

// How the hybrid demo codes a chunk of attention KV and a state record. The raw coder
// stores both byte-exact (codec raw payloads of f32 KV, EncodeStateRecord).
class HybridKvCoder {
 public:
  virtual ~HybridKvCoder() = default;
  virtual std::string name() const = 0;
  // The namespace's codec id and artifact digest (part of every chunk key).
  virtual std::string codec_id() const = 0;
  virtual std::string artifact_digest() const { return ""; }
  // Lossy KV (dckv): hits are checked for an exact state and measured for quality
  // (top-1 agreement, KL) instead of exact KV and logits.
  virtual bool lossy() const { return false; }
  // Payload of the exact KV of tokens [begin, end) of `prefix` (whose exact state
  // after all its tokens is `state`). `partial`: the chain's short last chunk.
  virtual Result<std::vector<uint8_t>> EncodeChunk(std::span<const uint32_t> prefix,
                                                   const hybrid::HybridState& state, uint32_t begin,
                                                   uint32_t end, bool partial) const = 0;
  // The state record of `recurrent` (the exact state at its boundary_tokens).
  virtual Result<std::vector<uint8_t>> EncodeState(std::span<const uint32_t> prefix,
                                                   const RecurrentState& recurrent) const = 0;
  // The state at the boundary the payloads reach: decodes and checks every payload
  // and the record. Any failure is an error (the caller's miss).
  virtual Result<hybrid::HybridState> Restore(std::span<const uint32_t> prefix,
                                              std::span<const std::vector<uint8_t>> payloads,
                                              std::span<const uint8_t> state_record,
                                              double* predictor_ms) const = 0;
};

// Stores KV as codec-raw f32 payloads and states as raw records
// (model/hybrid/hybrid_stored.h).
std::unique_ptr<HybridKvCoder> MakeRawHybridCoder(const hybrid::HybridModel& model);

// Codes KV and states against the int8 predictor (model/hybrid/hybrid_spec.h); the
// encoder keeps the predictor's state over the last prefix it saw, so encode a
// prefix's chunks and states in order. Not thread-safe (that cache).
std::unique_ptr<HybridKvCoder> MakeSpecHybridCoder(const hybrid::HybridModel& model,
                                                   std::shared_ptr<const hybrid::HybridPredictor> predictor,
                                                   std::shared_ptr<const spec::SpecStateArtifact> artifact);

// Lossy-codes the KV with dckv (decoded to bf16, widened to fp32) and stores the
// state exact (raw records).
std::unique_ptr<HybridKvCoder> MakeDckvHybridCoder(const hybrid::HybridModel& model,
                                                   std::shared_ptr<const dckv::DckvCodec> codec);

// A dckv artifact for the hybrid's attention layers (one layer group each; no token
// conditioning; raw head 4, raw tail 128 positions) from the exact K (un-rotated with
// the codec's own RoPE) and V of `sequences` run from the empty state.
// Errors: model and dckv calibration errors.
Result<dckv::DckvArtifact> CalibrateHybridDckv(const hybrid::HybridModel& model,
                                               std::span<const std::vector<uint32_t>> sequences,
                                               double target_ratio);

struct HybridDemoRunOptions {
  uint32_t gen_tokens = 8;    // tokens generated per request. Default: 8.
  uint32_t chunk_tokens = 256;  // tokens per stored chunk. Default: 256.
  uint32_t state_every = 2;   // a state record every this many chunks (+ the prefix end). Default: 2.
  bool verbose = true;        // one progress line per request on stderr
  // Which LOOKUP hits are restored (DemoRunOptions::restore_policy). Default: kCost.
  RestoreCostOptions::Policy restore_policy = RestoreCostOptions::Policy::kCost;
};

struct HybridDemoReference {
  struct Doc {
    hybrid::HybridState prefix_state;             // exact state after the prefix
    std::map<uint32_t, RecurrentState> states;    // exact recurrent state by boundary (tokens)
  };
  struct Request {
    double full_prefill_ms = 0;    // full prompt evaluation + first token
    std::vector<float> logits;     // [prompt tokens, vocab]: every row of the full prefill
    std::vector<uint32_t> answer;  // greedy, gen_tokens
  };
  std::vector<Doc> docs;
  std::vector<Request> requests;
  double wall_s = 0;
};

// The boundaries (token counts) at which a prefix of `prefix_tokens` tokens gets a
// state record: every state_every chunks and the prefix end.
std::vector<uint32_t> HybridStateBoundaries(uint32_t prefix_tokens, const HybridDemoRunOptions& o);

Result<HybridDemoReference> RunHybridReference(const hybrid::HybridModel& model, const DemoWorkload& workload,
                                               const HybridDemoRunOptions& options);

// A codec row plus the state part of what was stored.
struct HybridDemoRow {
  DemoCodecRow base;                      // KV + state bytes together in raw/stored_bytes
  uint64_t kv_raw_bytes = 0, kv_stored_bytes = 0;        // fp32 KV vs its payloads
  uint64_t state_raw_bytes = 0, state_stored_bytes = 0;  // fp32 state tensors vs records
  uint32_t states_put = 0;
  uint32_t state_checks = 0, kv_checks = 0, logit_checks = 0;  // hits whose check held
  uint64_t restored_state_tokens = 0;     // sum of the boundaries restored
};

// `cache_salt` separates this run's keys from earlier runs'.
Result<HybridDemoRow> RunHybridCodec(const hybrid::HybridModel& model, const DemoWorkload& workload,
                                     const HybridDemoReference& reference, const HybridKvCoder& coder,
                                     const std::string& cache_salt, const std::string& tenant, Client* client,
                                     const HybridDemoRunOptions& options);

}  // namespace kvstash::demo
