// Spec state coding measured on the real RWKV-7 (`kvstash-bench codec --codec spec
// --state`): runs the fp32 reference runtime (the "engine") and each deterministic
// predictor variant (model/rwkv7/rwkv7_predictor.h) over real text byte by byte,
// snapshots both states every `every` tokens, calibrates a state artifact
// (codec/spec/spec_state_artifact.h) on the calibration documents, then codes every
// evaluation state against its predicted state (codec/spec/spec_state_codec.h),
// verifying each decodes bit-exactly. Compared in one table (part = "state",
// dtype = "f32"):
//   spec/<variant>     actual coded bytes (headers included), per predictor variant
//   zstd-19            zstd level 19 on each state's bytes
//   zstd-19-shuffled   the same after a byte-plane shuffle
//   byte-plane         ideal order-0 byte-plane coder (tables excluded: a lower bound
//                      for a real byte-plane rANS coder)
// ratio_vs_baseline divides by the best (smallest) of the three model-free rows.
// Every RWKV-7 row has model "rwkv7"; with `hybrid`, the tiny hybrid's rows
// (RunHybridSpecStateBench, below) follow, with their setup under "hybrid".
// Speeds and predictor_cost_vs_forward (predictor time / exact forward time over the
// evaluation texts) use thread CPU time.
//
// Thread-safety: one run at a time (single-threaded inside).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/default_paths.h"
#include "kvstash/result.h"

namespace kvstash::bench {

struct SpecStateBenchOptions {
  // rwkv.cpp RWKV-7 model file. Default: $KVSTASH_SHARED_MODELS_DIR or ../shared/models,
  // /tiny-rwkv-7v0-834K-FP32.bin.
  std::string model_path;
  // Calibration and evaluation texts (disjoint documents), fed as bytes.
  std::vector<std::string> cal_texts = {"/usr/share/common-licenses/LGPL-2.1",
                                        "/usr/share/common-licenses/GFDL-1.3"};
  std::vector<std::string> eval_texts = {"/usr/share/common-licenses/GPL-3",
                                         "/usr/share/common-licenses/Apache-2.0",
                                         "/usr/share/common-licenses/MPL-2.0"};
  // Boundary spacing in tokens. Default: 256.
  uint32_t every = 256;
  // Predictor variants: "int8-gN", "bf16", "fp16", "fp32". Default below.
  std::vector<std::string> predictors = {"int8-g64", "int8-g32", "int8-g16", "bf16", "fp16"};
  int zstd_level = 19;
  // Also the tiny hybrid's rows (RunHybridSpecStateBench with its defaults and these
  // texts). Default: true.
  bool hybrid = true;
};

// The tiny Qwen3.5 hybrid (model/hybrid, RANDOM weights: its numbers show the
// machinery, not a trained model's statistics): rows of part "kv" (the fp32 attention
// K/V of each `every`-token span) and "state" (Gated DeltaNet conv + delta states at
// each boundary), each with model "tiny-qwen35-random", the same three model-free
// baselines as above and spec/int8-gN rows (one artifact per predictor, calibrated on
// both parts). The texts are fed as bytes modulo the vocabulary, in documents of at
// most max_doc_tokens tokens.
struct HybridStateBenchOptions {
  std::string model_dir;  // config.json + model.safetensors
  std::vector<std::string> cal_texts, eval_texts;
  uint32_t every = 256;
  uint32_t max_doc_tokens = 2048;
  uint64_t max_cal_tokens = 8192, max_eval_tokens = 16384;
  std::vector<int> predictor_groups = {64, 16};
  int zstd_level = 19;
};

// Errors: the model's load errors; IOError for a missing text; InvalidArgument for
// texts shorter than `every` or every > max_doc_tokens; Internal when a boundary
// fails to round-trip (each is verified).
Result<nlohmann::json> RunHybridSpecStateBench(const HybridStateBenchOptions& options);



// Rows as described above plus the setup. Errors: IOError/InvalidArgument for missing
// model or texts, bad variant names; Internal when a state fails to round-trip (the
// bench verifies every one).
Result<nlohmann::json> RunSpecStateBench(const SpecStateBenchOptions& options);

}  // namespace kvstash::bench
