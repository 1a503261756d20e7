// `kvstash-demo --engine llama.cpp` (the default engine): the demo's workload with
// llama.cpp as the inference engine, a DemoEngine of the one driver (demo_driver.h). Misses are llama.cpp
// prefills whose sequence state is exported and stored; hits restore llama.cpp's own cache into llama.cpp and
// prefill only the question (demo_llama_runner.h has the loop and the checks).
//
// Set-up beside the reference-engine demo: libllama loads the same GGUF (flash
// attention off, K/V of options.llama_kv_dtype, options.llama_threads threads, one
// sequence; the context holds the longest prompt plus the generated tokens); chains
// cover each document's prefix (system prompt + document); spec's predictor arithmetic
// is options.predictor_arithmetic: with "auto" (the default) the variant that copies
// llama.cpp's CPU arithmetic ("ggml-q4_1-<dtype>", model/predictor/spec_predictor.h)
// when model::GgmlArithmeticSupport accepts the model (SmolLM2's Q4_1 GGUF), else the
// int arithmetic ("w8a16-g128": Qwen2's q/k/v biases and Q4_K/Q5_0/Q6_K/Q8_0 blocks;
// lossless, more bits), printed with the reason and recorded in the JSON setup; its
// tables are calibrated on llama.cpp's KV of
// the calibration text in that dtype (cached like every demo artifact); dckv's basis is
// fitted on llama.cpp's own KV of the same text too (in that dtype, K rotated back to
// before RoPE with the codec's inverse RoPE, dckv::AppendChunkRows; the relative RMS
// difference from our runtime's rows of the same tokens is printed and in the JSON
// setup's dckv_fit), with the token-conditioned and checkerboard entropy models and,
// for the default model, the committed per-dimension Fisher weights
// (options.dckv_rows / dckv_conditional / dckv_weights; "reference", off, "none" give
// the fitting before issue 35: our runtime's fp32 rows, plain PCA). With spec, the report also codes every
// document prefix's KV from our runtime (rounded to the same dtype) with the same codec, so spec's bits per
// scalar on llama.cpp's KV stand beside those on our runtime's KV of the same tokens.
//
// Acceptance (exit code 0): token hit rate > 50%; every raw/spec hit logit-identical to
// llama.cpp continuing from its own cache of the prefix (demo_llama_runner.h: the
// storing miss's prefill cut back to the prefix, then the question) and with the same
// greedy answer; no hit
// that failed to load; hit TTFT < miss TTFT for raw and dckv (spec's TTFT is reported:
// on a CPU our predictor is slower than llama.cpp's quantised prefill of SmolLM2).
// Returns 1 when a check fails or a step errs (also --predictor-arithmetic ggml on a
// model it cannot run), 2 for bad options (hybrid, an unknown
// codec, a KV dtype other than f16/bf16), 1 with a clear message when kvstash was built
// without llama.cpp (scripts/setup.sh installs it).
// Thread-safety: one demo at a time per process.
#pragma once

#include <memory>

#include "demo/demo.h"
#include "demo/demo_driver.h"

namespace kvstash::demo {

// llama.cpp's demo of `options` (options.engine "llama.cpp"), as the driver's
// DemoEngine (demo_driver.h). REQUIRES: `options` outlives it.
std::unique_ptr<DemoEngine> MakeLlamaDemo(const DemoOptions& options);

}  // namespace kvstash::demo
