// The dckv codec's measurement on a real model and real text (`kvstash-bench codec
// --codec dckv|kvtc|dckv+kvtc --rate R`) and its calibration (`kvstash calibrate dckv`).
//
// Calibration: the target model runs over the calibration corpus (model/corpus/text_corpus.h),
// ceil(cal_tokens / cal_doc_tokens) documents spread evenly over the split's documents
// (prose and code); the rows (K before RoPE and V of every layer) of every position
// except each document's first raw_head (the attention sinks, stored raw) are fitted by
// codec/dckv/dckv_calibration.h, one artifact per rate point, with the step allocation
// weighted by the measured output sensitivity of each layer's K and V heads (see
// DckvBenchOptions::sensitivity_docs).
// Evaluation, on the DISJOINT evaluation corpus: `prompts` documents of prompt_tokens
// + continuation_tokens tokens, spread evenly over the split's full-length documents. For each prompt the exact fp32 cache of the prompt is
// converted to bf16 chunks (chunk_tokens each, as a store holds them), coded and
// decoded; the decoded cache is restored (FromKvChunk) and the continuation is
// prefilled teacher-forced with logits for every token. Against the exact cache's
// logits over the same continuation:
//   kl_mean         mean over continuation positions of KL(p_exact || p_decoded), nats
//   top1_agreement  fraction of positions whose argmax agrees
//   greedy_match    mean fraction of greedy_tokens generated after the continuation
//                   before the first token that differs from the exact cache's
// Sizes: bytes_per_token = payload bytes of the coded positions (headers, framing and
// rANS streams; raw rows excluded) / coded positions; request_bytes_per_token = all
// payload bytes (raw head/tail rows included) / all positions; ratio_vs_bf16 =
// bf16 bytes per token / bytes_per_token. encode/decode MB/s count bf16 chunk bytes
// per second of Encode / Decode (one thread). The KVTC-like baseline
// (codec/baselines/kvtc.h) is measured the same way on the same PCA and prompts. A "bf16" row gives the same quality
// metrics for the plain bf16 cache (the storage format the ratio is against).
//
// Thread-safety: not reentrant; one run at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/result.h"

namespace kvstash::bench {

struct DckvBenchOptions {
  std::string model_path;
  std::vector<double> rates = {8, 16, 24, 32, 48};  // target ratios vs bf16
  uint64_t cal_tokens = 4096;          // calibration tokens
  uint32_t cal_doc_tokens = 1024;      // tokens per calibration document
  uint32_t prompt_tokens = 1024;       // >= 1,000 for the quality figures
  uint32_t continuation_tokens = 64;   // teacher-forced tokens scored
  uint32_t prompts = 2;                // evaluation prompts
  uint32_t greedy_tokens = 32;         // greedy tokens compared after the continuation
  uint32_t chunk_tokens = 256;
  uint32_t group_layers = 6;           // layers per transform group
  uint32_t raw_head = 4;
  uint32_t raw_tail = 128;
  double active_threshold = 0.3;
  bool conditional = true;             // token-conditioned models (codec/dckv/dckv_conditional.h)
  bool checkerboard = true;            // checkerboard context model (needs conditional)
  uint32_t embed_rank = 128;           // reduced token embedding size
  // Output-sensitivity weighting (dckv_calibration.h, DckvFitOptions::output_weight).
  // sensitivity_file non-empty: per-dimension weights from tools/dckv_output_fisher.py
  // (diagonal Fisher information; JSON, checked against the model's shape). Otherwise
  // per (layer, K/V, kv head) block, measured on `sensitivity_docs` full-length
  // calibration documents (0: plain MSE allocation): their last sensitivity_tokens
  // tokens are the scored continuation, noise of sensitivity_noise x each block's RMS.
  // Weights below sensitivity_floor x their mean are raised to it.
  std::string sensitivity_file;
  uint32_t sensitivity_docs = 2;
  uint32_t sensitivity_tokens = 32;
  double sensitivity_noise = 0.1;
  double sensitivity_floor = 0.01;
  // true: the weights shape the PCA (DckvFitOptions::output_weight); false: only the
  // per-component steps of an unweighted PCA (DckvRateOptions::output_weight).
  bool weighted_pca = true;
  std::string artifact_dir;            // where artifacts are written ("" = none)
  // Artifacts scored beside the calibrated rate points (e.g. trained codecs imported by
  // `kvstash calibrate dckv --trained`), one "dckv-file" row each on the same prompts.
  // Each must fit the model (shape, RoPE base, vocabulary when it conditions on tokens)
  // and use raw_head / raw_tail (the rows' raw-position rule): InvalidArgument otherwise.
  std::vector<std::string> artifact_files;
  bool run_dckv = true;                // rows of the dckv codec
  bool run_kvtc = false;               // rows of the KVTC-like baseline (codec/baselines/kvtc.h)
};

// The weights a command uses when the user chose none: the committed per-dimension
// file of the default model (DefaultDckvSensitivityFile) when `model_path` is
// DefaultModelPath() and neither a file nor a document count was given; otherwise the
// options as they are (noise measurement on sensitivity_docs documents).
void ApplyDefaultSensitivity(DckvBenchOptions* options, bool file_given, bool docs_given);

// Returns {"rows": [...], "setup": {...}}.
Result<nlohmann::json> RunDckvBench(const DckvBenchOptions& options);

// Writes one artifact per rate to options.artifact_dir as dckv-g<group>-r<rate>.kvda.
Status CalibrateDckv(const DckvBenchOptions& options);

// Imports a trained codec (`kvstash calibrate dckv --trained FILE --base ARTIFACT`):
// the interchange file at trained_path on the base artifact at base_path
// (codec/dckv/dckv_trained.h), its conditional models, table indices and tables
// refitted (dckv::RefitDckvArtifact) on the calibration rows collected as above
// (model_path, cal_tokens, cal_doc_tokens; the base artifact's raw_head; token ids
// when the base conditions on tokens; checkerboard as given). Writes
// options.artifact_dir/<stem of trained_path>.kvda and returns a summary (per group:
// n_active, encoder basis, nets, checkerboard; estimated bits per token; the path).
// Errors: those of TrainedDckvTransform and RefitDckvArtifact; Mismatch when the base
// artifact's shape, RoPE base or vocabulary is not the model's; IOError for files.
Result<std::string> ImportTrainedDckv(const DckvBenchOptions& options, const std::string& trained_path,
                                      const std::string& base_path);

}  // namespace kvstash::bench
