// The spec codec's measurement on a real model and real text (`kvstash-bench codec
// --codec spec`): calibrates on the calibration corpus, codes the evaluation corpus
// chunk by chunk, verifies every chunk decodes bit-exactly, and compares in one table:
//   spec            our coder, actual bitstreams (payload headers included)
//   spec-published  the published method's ideal code length: FP8-block predictor,
//                   static per-(layer, K/V, head, channel) sigma, fixed 0.95/0.03/0.02
//                   mixture with the calibration marginal (bf16; fp8: the
//                   cell-integrated Gaussian alone), on the same text
//   per-channel     the spec coder with the per-channel calibration mean as
//                   "prediction" (per-channel statistics without a predictor)
//   byte-plane      model-free byte-plane rANS (codec/baselines/byte_plane.h)
//   zstd-19         zstd level 19 on the raw chunk bytes
//
// Thread-safety: not reentrant (uses the BLAS thread pool); one run at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/dtype.h"
#include "kvstash/result.h"

namespace kvstash::bench {

struct SpecBenchOptions {
  std::string model_path;          // GGUF / safetensors / llama2.c
  std::vector<DType> dtypes;       // bf16 and/or fp8_e4m3
  uint64_t eval_tokens = 20000;    // evaluation tokens (multiple of chunk_tokens used)
  uint64_t cal_tokens = 8192;      // calibration tokens
  uint32_t doc_tokens = 1024;      // tokens per document (prompt)
  uint32_t chunk_tokens = 256;
  int threads = 2;
  int predictor_group = 128;
  int predictor_activation_bits = 16;
  // "int" (our int8 predictor, predictor_group / predictor_activation_bits apply) or
  // "ggml" (the ggml-q4_1-<predictor_kv_dtype> variant: GGUF Q4_1 models only).
  std::string predictor_arithmetic = "int";
  DType predictor_kv_dtype = DType::kBF16;  // ggml only: f16 or bf16
  bool predictor_int8_attention = false;    // int only: the "-attn8" variant
  std::string artifact_dir;        // where calibrated artifacts are written ("" = none)
};

// Runs the benchmark; returns {"rows": [...], "breakdown": {...}, "setup": {...}}.
Result<nlohmann::json> RunSpecBench(const SpecBenchOptions& options);

// Calibration only (`kvstash calibrate spec`): writes one artifact per dtype to
// options.artifact_dir as spec-<predictor variant>-<dtype>.kvsa.
Status CalibrateSpec(const SpecBenchOptions& options);

}  // namespace kvstash::bench
