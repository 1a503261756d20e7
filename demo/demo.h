// `kvstash-demo`: the main job end to end on a real model (SmolLM2-135M), real text and
// a real kvstash server. RunDemo picks the engine's demo (a DemoEngine) and runs it
// through the one driver (demo_driver.h): the demo loads the model, loads or
// calibrates the codec artifacts (demo_artifacts.h), builds the shared-prefix RAG
// workload (demo_workload.h), runs one engine-session pass per codec
// (demo_session_pass.h), which share the reference results, and prints the table
// (demo_report.h). The engine that prefills misses and continues from restored caches
// is llama.cpp by default (demo_llama.h: llama.cpp's own KV is stored and restored) or
// our reference runtime with engine "reference" (demo_reference.h); with
// options.hybrid enabled it runs the hybrid variant instead (demo_hybrid.h, reference
// runtime only). Progress and the report go to stdout, errors to stderr.
//
// Returns the exit code: 0 when every acceptance check holds, 1 when one fails or a
// step errs, 2 for bad options.
// Thread-safety: one demo at a time per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/default_paths.h"
#include "demo/demo_artifacts.h"
#include "demo/demo_hybrid.h"
#include "demo/demo_workload.h"
#include "kvstash/client.h"
#include "kvstash/restore_cost.h"

namespace kvstash::demo {

struct DemoOptions {
  // "llama.cpp" (default) or "reference" (the embedded runtime).
  std::string engine = "llama.cpp";
  // With engine llama.cpp: KV cache dtype (type_k = type_v): kF16 (llama.cpp's
  // default) or kBF16. The reference engine stores bf16. Default: kF16.
  DType llama_kv_dtype = DType::kF16;
  // llama.cpp threads (prompt and generation). Default: 1: ggml's threads spin at
  // every operation barrier, so on a machine busier than its cores (CI: 2 cores, other
  // jobs) 2 threads made a 19-token prefill take 8 s instead of 0.3 s with 1 thread.
  int llama_threads = 1;
  // Codecs to run, in order. Default: raw, spec, dckv.
  std::vector<std::string> codecs = {"raw", "spec", "dckv"};
  std::string model_path = DefaultModelPath();  // GGUF with tokenizer
  ClientOptions client;           // servers, tenant, credential, deadline
  std::string start_server;       // kvstash-server binary; "" = use client.servers
  std::string data_dir = "data";  // with start_server: RocksDB folder
  uint16_t port = 7470, http_port = 7471;  // with start_server (0: any free port)
  bool keep_server = false;       // with start_server: leave it running at the end
  DemoWorkloadOptions workload;
  DemoArtifactOptions artifacts;
  uint32_t gen_tokens = 8;        // tokens generated per request
  int predictor_threads = 2;      // threads of the spec predictor
  // With engine llama.cpp: the spec predictor's arithmetic (SpecPredictorOptions::
  // Arithmetic). "ggml" copies llama.cpp's CPU products (Q4_1 GGUFs such as SmolLM2's:
  // it predicts llama.cpp's KV best); "int" is W8A16-g128, which runs every model the
  // runtime loads (q/k/v biases, any GGUF block type) and stays lossless, at more bits
  // on llama.cpp's KV; "auto" picks ggml when model::GgmlArithmeticSupport accepts the
  // model, else int, and prints which and why. Default: "auto".
  std::string predictor_arithmetic = "auto";
  // With engine llama.cpp: how dckv's basis is fitted (DemoArtifactOptions::
  // dckv_engine_rows, dckv_conditional, dckv_weights_file). dckv_rows: "engine"
  // (llama.cpp's own KV of the calibration text, K rotated back with the codec's
  // inverse RoPE) or "reference" (our runtime's fp32 KV, the fitting before issue 35).
  // dckv_conditional: token-conditioned and checkerboard entropy models. dckv_weights:
  // "auto" (the committed Fisher weights, DefaultDckvSensitivityFile(), when the model
  // is the default model file and the file exists; else none), "none", or a weights
  // file (dckv::ReadOutputWeights). The reference engine keeps its fitting (our runtime's
  // rows, no conditional models, no weights). Defaults: "engine", true, "auto".
  std::string dckv_rows = "engine";
  bool dckv_conditional = true;
  std::string dckv_weights = "auto";
  std::string json;               // also write the report as JSON here ("" = no)
  bool quiet = false;             // no per-request progress lines
  // Which LOOKUP hits are restored (DemoRunOptions::restore_policy). Default: kCost.
  RestoreCostOptions::Policy restore_policy = RestoreCostOptions::Policy::kCost;
  HybridDemoOptions hybrid;       // the hybrid variant (off by default)
};

// The demo of `options` (see the top); returns the exit code.
int RunDemo(DemoOptions options);

}  // namespace kvstash::demo
