// `kvstash-demo --model-kind hybrid`: the main-job workload on a Qwen3.5-style hybrid
// model (model/hybrid; default the committed tiny random-weight config
// tests/model/hybrid/data/tiny_qwen35) through a real kvstash server, with KV + recurrent
// state stored at chunk boundaries and the restored KV, state and continuation checked
// exact on every hit (demo/demo_hybrid_runner.h), a DemoEngine of the one driver
// (demo/demo_driver.h).
//
// Tokens: the workload is built as for SmolLM2 (demo/demo_workload.h: real text,
// SmolLM2's tokenizer from the --model GGUF, its chat template), then every token id is
// taken modulo the hybrid model's vocabulary (128 for the tiny config, which has no
// tokenizer of its own). The ids therefore keep real text's repetition structure (the
// shared prefixes, the same question in several requests) but are meaningless to the
// random-weight model; answers are compared token for token, never read.
//
// Codecs: raw (f32 KV payloads, raw state records) and spec (KV and state coded
// against the deterministic int8 predictor, model/hybrid/hybrid_spec.h; its artifact
// is calibrated at start-up on --hybrid-cal-tokens tokens of the CALIBRATION split,
// mapped the same way: seconds for the tiny model) and dckv (the attention KV lossy,
// demo/demo_hybrid_dckv.cc, artifact calibrated on the same text; the state
// stays exact and is checked exact on every hit; continuations are scored by top-1
// agreement and KL against the full prefill).
//
// Exit code: 0 when every acceptance check holds (token hit rate > 50%, hit TTFT below
// miss TTFT, every hit exact), 1 when one fails, 2 for bad options.
// Thread-safety: runs on the caller's thread; not reentrant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "demo/demo_driver.h"
#include "demo/demo_workload.h"
#include "kvstash/client.h"
#include "kvstash/restore_cost.h"

namespace kvstash::demo {

// The hybrid-only options of `kvstash-demo` (cli/demo/demo_command.cc: --model-kind, --hybrid-*).
struct HybridDemoOptions {
  std::string model_kind = "smollm2";  // "smollm2" (the main demo) or "hybrid"
  std::string hybrid_model;            // hybrid model folder; "" = the tiny fixture
  uint32_t chunk_tokens = 256;         // tokens per stored chunk
  uint32_t state_every = 2;            // a state record every this many chunks (+ the prefix end)
  uint64_t cal_tokens = 8192;          // spec: calibration tokens (CALIBRATION split of model/corpus/text_corpus.h)
  int predictor_group = 16;            // spec: int8 group of the predictor
  double dckv_rate = 8.0;              // dckv: target ratio of the attention KV vs bf16
  bool enabled() const { return model_kind == "hybrid"; }
};

// The options `kvstash-demo` shares between model kinds.
struct DemoCommonArgs {
  std::vector<std::string> codecs;
  std::string tokenizer_model;  // GGUF whose tokenizer builds the workload (--model)
  ClientOptions client;
  std::string start_server, data_dir;
  uint16_t port = 0, http_port = 0;
  bool keep_server = false;
  DemoWorkloadOptions workload;
  uint32_t gen_tokens = 8;
  std::string json;
  bool quiet = false;
  RestoreCostOptions::Policy restore_policy = RestoreCostOptions::Policy::kCost;
};

// The hybrid demo of `flags` and `args` (flags.enabled()), as the driver's DemoEngine
// (demo_driver.h).
std::unique_ptr<DemoEngine> MakeHybridDemo(const HybridDemoOptions& flags, DemoCommonArgs args);

}  // namespace kvstash::demo
