// One codec pass of `kvstash-demo` over an engine session
// (engines/session/engine_session.h): the request loop shared by the reference runtime
// (demo_runner.h), llama.cpp (demo_llama_runner.h) and the hybrid runtime
// (demo_hybrid_runner.h), against a live kvstash server.
// What differs per engine (how an answer is generated and what a hit is checked
// against) is a SessionPassChecks.
//
// Per request (prompt = the document's prefix + the question; the chain covers the
// prefix: chain_tokens = |prefix|):
//   LOOKUP the prefix chain (EngineSession::Lookup); the session's cost model decides
//   whether a hit is restored (EstimateRestore).
//   miss, or a declined hit: EngineSession::PrefillMiss: the engine prefills the whole
//     prompt in one batch; TTFT = lookup + that prefill + the first token (the argmax of
//     its logits). The session exports the sequence and PUTs the chunks the store lacks
//     on its background thread; the pass waits for them (Flush) before the next request
//     (encode and PUT are not part of TTFT; their time per miss is reported). A
//     declined hit counts apart (declined, declined_tokens) with its estimate.
//   hit:  EngineSession::RestoreHit: GET (pipelined), verify and decode, import, then
//     the engine prefills the rest; TTFT = lookup + restore + that prefill + the first
//     token. A hit the session had to recompute (EvalResult::fallback) counts as
//     mismatched: the demo expects every hit to load. Otherwise the checks decide
//     (hits_verified, else hits_mismatched).
//   Time of a hit: lookup, network (GET round trips minus the server's own GET time),
//   store (the server's GET handling time from its /v1/stats), predictor (spec), decode
//   (+ import), suffix prefill (+ first token): medians over the hits.
//
// Thread-safety: not reentrant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "demo/demo_runner.h"
#include "demo/demo_workload.h"
#include "engines/session/engine_session.h"
#include "kvstash/client.h"

namespace kvstash::demo {

// The engine-specific part of a pass.
class SessionPassChecks {
 public:
  virtual ~SessionPassChecks() = default;
  // After request `request` (0-based) ran as a miss or a declined hit; the session's
  // engine holds its prompt.
  virtual Status AfterPrefill(size_t request) = 0;
  // After a loaded hit of request `request`: `r` is the session's result (the engine
  // holds the prompt; r.logits are the last prompt token's). Generates the answer in the
  // engine and checks it: returns whether the hit is verified. Lossless codecs add the
  // answers equal to the reference to row->same_tokens_as_fp32; lossy ones (dckv) score
  // each answer position (ScorePosition into *top1 and *kl, row->scored_positions).
  virtual Result<bool> CheckHit(size_t request, const session::EvalResult& r, DemoCodecRow* row, double* top1,
                                double* kl) = 0;
  // After the last request, with the session's counters (its PUTs all finished).
  // Default: nothing.
  virtual void AfterPass(const session::SessionStats& stats) { (void)stats; }
};

struct SessionPassOptions {
  uint32_t gen_tokens = 8;  // tokens generated per request (> 0). Default: 8.
  bool verbose = true;      // one progress line per request on stderr
  // Which LOOKUP hits are restored (DemoRunOptions::restore_policy). Default: kCost.
  RestoreCostOptions::Policy restore_policy = RestoreCostOptions::Policy::kCost;
  std::string engine;      // the engine's name in progress lines ("llama.cpp", "reference")
  std::string reference;   // DemoCodecRow::reference: what hits are checked against
  std::string exact_text;  // progress-line words of a verified lossless hit
};

// One pass of `codec` over the workload: an engine session over `engine` (with its own
// restore cost model) against `client`'s server. `checks` may hold a pointer to the
// engine (it lives until the pass returns). Errors: InvalidArgument for gen_tokens 0 or
// a prompt (+ gen_tokens) longer than the engine holds; EngineSession::Create's, the
// session's, the engine's and the checks' errors (a failed restore is not an error: it
// is counted).
Result<DemoCodecRow> RunSessionPass(std::unique_ptr<session::Engine> engine,
                                    std::shared_ptr<const session::ChunkCodec> codec,
                                    std::shared_ptr<Client> client, const DemoWorkload& workload,
                                    SessionPassChecks* checks, const SessionPassOptions& options);

}  // namespace kvstash::demo
