// The codec passes of `kvstash-demo --model-kind hybrid`: the main-job workload
// (demo/demo_workload.h) on a Qwen3.5-style hybrid model (model/hybrid), whose
// reusable prefix is the attention layers' KV PLUS the linear layers' recurrent state
// (conv and delta-rule states), against a live kvstash server.
//
// Reference pass (once, shared by all codecs): every request's prompt (document prefix
// + question) is evaluated in full from the empty state with the logits of EVERY
// position kept, and greedy decoding gives the reference answer. For each document the
// exact state after the prefix is kept, and the exact recurrent state at every boundary
// where the codec pass stores one (every `state_every` chunks and the prefix end).
//
// Codec pass (per codec, fresh namespace: the cache salt holds the run id): the engine
// session's pass (demo_session_pass.h) over the hybrid runtime
// (engines/hybrid/hybrid_engine.h) with the codec's session::ChunkCodec
// (demo_hybrid_codec.h), a fresh restore cost model per pass. The session LOOKs UP the
// prefix chain with require_state (the longest stored prefix that ends at a boundary
// carrying a state); a miss prefills the prompt and PUTs the chunks the server lacks,
// each chunk that ends at a state boundary with its state record; a hit GETs the
// matched chunks (the last with its state record), decodes them, imports KV + state
// and prefills the rest of the prompt. EVERY loaded hit is checked, outside the timed
// part:
//   - the restored KV of tokens [0, b) is byte-identical to the exact fp32 KV;
//   - the restored recurrent state is byte-identical to the exact state at b;
//   - the logits of every suffix position are bit-identical to the full prefill's
//     rows b.. (the continuation equals the full prefill), and the greedy answer
//     equals the reference answer.
//   Lossy KV (dckv): the restored state must still be byte-exact (verified); the KV
//   and logits are not, so every continuation row is scored instead: top-1 agreement
//   and KL(p_full || p_restored) against the full prefill's row.
//   A restore that fails (corrupt payload or state record, wrong model) counts as a
//   mismatched hit and the session recomputes the prompt; never silently used.
//
// Thread-safety: not reentrant.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "demo/demo_runner.h"
#include "demo/demo_workload.h"
#include "engines/session/chunk_codec.h"
#include "kvstash/client.h"
#include "kvstash/kv_chunk.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_state.h"

namespace kvstash::demo {

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

// The reference pass (see the top). Errors: InvalidArgument for gen_tokens 0 or
// chunk_tokens 0 or above kMaxChunkTokens; the model's.
Result<HybridDemoReference> RunHybridReference(const hybrid::HybridModel& model, const DemoWorkload& workload,
                                               const HybridDemoRunOptions& options);

// A codec row plus the state part of what was stored.
struct HybridDemoRow {
  DemoCodecRow base;                      // KV + state bytes together in raw/stored_bytes
  uint64_t kv_raw_bytes = 0, kv_stored_bytes = 0;        // fp32 KV vs its payloads
  uint64_t state_raw_bytes = 0, state_stored_bytes = 0;  // fp32 state tensors vs records
  uint32_t states_put = 0;
  uint32_t state_checks = 0, kv_checks = 0, logit_checks = 0;  // hits whose check held
};

// One pass of `codec` (MakeHybridChunkCodec for `model`, a fresh cache salt) over the
// workload against `client`'s server. Errors: InvalidArgument for gen_tokens 0;
// RunSessionPass's (a failed restore is not an error: it is counted).
Result<HybridDemoRow> RunHybridCodec(const hybrid::HybridModel& model, const DemoWorkload& workload,
                                     const HybridDemoReference& reference,
                                     std::shared_ptr<const session::ChunkCodec> codec,
                                     std::shared_ptr<Client> client, const HybridDemoRunOptions& options);

}  // namespace kvstash::demo
