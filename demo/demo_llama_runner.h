// The request loop of `kvstash-demo --engine llama.cpp`: one pass over the workload per
// codec, with llama.cpp as the engine (engines/session/engine_session.h), against a
// live kvstash server; every hit checked against llama.cpp itself.
//
// The engine session's pass (demo_session_pass.h) over llama.cpp
// (engines/llama_cpp/llama_kv_engine.h: one context, sequence 0), with a fresh restore
// cost model per pass; after a loaded hit the session's context generates gen_tokens
// greedy tokens one at a time.
// Reference (computed once per (request, restored length) and shared by the codec
// passes; never part of a TTFT): a fresh llama.cpp context of the same parameters
// holds the prefix [0, r) (r = the restored tokens) as llama.cpp's own cache would
// after the miss that stored it (the document's first request: its prompt prefilled in
// one batch, as the miss did, then cut back to r positions; a prefill of [0, r) alone
// can differ in the last rows for repacked block types such as Qwen2's Q4_K), prefills
// [r, n) (the hit's batch split), generates greedily, and keeps the logits of the prompt's last token, the
// answer, and the log-softmax at each answer position. Checks on every hit: raw/spec: the last prompt token's
// logits bit-identical to the reference's and the same greedy answer (hits_verified, else hits_mismatched;
// same_tokens_as_fp32 counts equal answers). dckv: the reference answer is teacher-
// forced; top-1 agreement and KL(p_reference || p_dckv) per answer position.
//
// Thread-safety: not reentrant. The session and the reference context are created and
// used on the calling thread.
#pragma once

#include <llama.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "demo/demo_runner.h"
#include "demo/demo_workload.h"
#include "engines/llama_cpp/llama_engine.h"
#include "kvstash/client.h"
#include "kvstash/prefix_codec.h"

namespace kvstash::demo {

// llama.cpp's answers that the codec passes' hits are checked against (see the top).
struct LlamaDemoReference {
  struct Answer {
    std::vector<float> last_logits;  // [vocab] logits of the prompt's last token
    std::vector<uint32_t> tokens;    // greedy answer, gen_tokens tokens
    std::vector<float> logprobs;     // [gen_tokens, vocab] log-softmax at each answer position
  };
  std::map<std::pair<size_t, uint32_t>, Answer> answers;  // (request, restored tokens)
  double wall_s = 0;  // seconds spent computing them (outside every TTFT)
};

struct LlamaDemoRunOptions {
  llama_context_params params;  // the session's and the reference's (llama_cpp::ContextParams)
  uint32_t gen_tokens = 8;      // tokens generated per request. Default: 8.
  bool verbose = true;          // one progress line per request on stderr
  // Which LOOKUP hits are restored (DemoRunOptions::restore_policy). Default: kCost.
  RestoreCostOptions::Policy restore_policy = RestoreCostOptions::Policy::kCost;
};

// A pass of one codec. `codec` must have the context's KV layout (EngineSession::Create).
// Errors: InvalidArgument for gen_tokens 0 or a prompt longer than the context; the
// session's and llama.cpp's errors (a failed restore is not an error: it is counted).
Result<DemoCodecRow> RunLlamaDemoCodec(llama_model* model, const DemoWorkload& workload,
                                       LlamaDemoReference* reference,
                                       std::shared_ptr<const PrefixCodec> codec,
                                       std::shared_ptr<Client> client,
                                       const LlamaDemoRunOptions& options);

}  // namespace kvstash::demo
