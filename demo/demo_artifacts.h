// Codec artifacts of `kvstash-demo`: loaded from a cache folder, or calibrated once on
// model/corpus/text_corpus.h's CALIBRATION split (disjoint from the demo's workload) and saved
// there.
//
// Cache key: XXH3-64 (hex) of a text naming everything the artifact depends on: the
// model fingerprint, the predictor digest and variant (spec), the calibration token
// budget, document length and file list, and the dckv rate and fitting options (the
// rows' source and dtype, conditional models, a hash of the weights file). Files:
//   <cache_dir>/spec-<key>.kvsa, <cache_dir>/dckv-<key>.kvda.
// A cached file that fails to parse, or a spec artifact of another predictor, is
// recalibrated and overwritten (reported in `cached`).
//
// Calibration runs the target model once over the calibration documents (with K
// before RoPE for dckv) and, for spec, the predictor; spec: two passes of
// spec::SpecCalibrator over 256-token chunks of options.kv_dtype (bf16 or f16), of our
// runtime's KV or, when options.engine_kv is set, of the engine's own KV of the same
// tokens (what the engine will store: llama.cpp's KV is not our runtime's to the bit,
// and tables fitted on it code it in fewer bits); dckv: FitDckvBasis +
// MakeDckvArtifact (codec/dckv/dckv_calibration.h) on our runtime's rows or, with
// dckv_engine_rows, the engine's (options below), the first raw_head positions of each
// document excluded (they are stored raw). The engine's KV of a document is computed
// once for both.
//
// Errors: NotFound when no calibration text exists; IOError when the cache folder cannot
// be written; model/codec errors.
// Thread-safety: not reentrant (one calibration at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "codec/spec/spec_artifact.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "model/forward/model.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::demo {

struct DemoArtifactOptions {
  std::string cache_dir = ".cache/kvstash-demo";  // Default: .cache/kvstash-demo
  uint64_t cal_tokens = 2048;      // calibration tokens. Default: 2,048.
  uint32_t cal_doc_tokens = 1024;  // tokens per calibration document. Default: 1,024.
  double dckv_rate = 16;           // dckv target ratio vs bf16. Default: 16.
  uint32_t dckv_group_layers = 6;  // layers per dckv transform group. Default: 6.
  uint32_t dckv_raw_head = 4;      // bf16 positions at a prefix start. Default: 4.
  uint32_t dckv_raw_tail = 128;    // bf16 positions at a prefix end. Default: 128.
  DType kv_dtype = DType::kBF16;   // dtype the spec tables are calibrated for. Default: bf16.
  // When set: the engine's KV of these tokens (canonical layout, kv_dtype, K after
  // RoPE), which spec calibrates on instead of our runtime's. engine_name names it in
  // the cache key. Default: unset (our runtime's KV).
  std::function<Result<KvChunk>(std::span<const uint32_t> tokens)> engine_kv;
  std::string engine_name = "reference";
  // dckv's fitting. All three at their defaults is the fitting of the reference demo
  // (our runtime's fp32 rows, plain PCA, no conditional models; its cache key is the
  // v1 key, so cached artifacts stay valid); each one set changes the key.
  // dckv_engine_rows (needs engine_kv): fit on the engine's own KV of the calibration
  // text (in kv_dtype, K rotated back with the codec's inverse RoPE,
  // dckv::AppendChunkRows) instead of our runtime's; the relative RMS difference of
  // the two row sets is reported (DemoArtifacts::dckv_rows_rms_k / _v).
  bool dckv_engine_rows = false;
  // Token-conditioned and checkerboard entropy models (codec/dckv/dckv_conditional.h;
  // the model's embedding table, rank 128).
  bool dckv_conditional = false;
  // Per-dimension output weights (dckv::ReadOutputWeights, e.g. the committed Fisher
  // file benchmarks/inputs/smollm2-135m-dckv-fisher.json), floored at 0.01 x their
  // mean, for a weighted PCA (DckvFitOptions::output_weight). Empty: none. The key
  // holds a hash of the file's bytes.
  std::string dckv_weights_file;
};

struct DemoArtifacts {
  bool want_spec = false, want_dckv = false;
  spec::SpecArtifact spec;
  dckv::DckvArtifact dckv;
  std::string spec_path, dckv_path;
  bool spec_cached = false, dckv_cached = false;  // loaded instead of calibrated
  double calibration_s = 0;                       // wall time spent calibrating
  uint64_t calibration_tokens = 0;                // tokens calibrated on (0 if all cached)
  // dckv calibrated on the engine's rows (DemoArtifactOptions::dckv_engine_rows): the
  // relative RMS difference sqrt(sum (e - r)^2 / sum r^2) between the engine's rows e
  // and our runtime's fp32 rows r of the same tokens, K before RoPE and V over all
  // layers; -1 when not measured (cached, or our runtime's rows).
  double dckv_rows_rms_k = -1, dckv_rows_rms_v = -1;
};

// The demo's --codec names as kinds, in order, and which artifacts they need.
struct DemoCodecs {
  std::vector<PrefixCodecKind> kinds;
  bool want_spec = false, want_dckv = false;
};
// Errors: InvalidArgument naming an unknown codec.
Result<DemoCodecs> ParseDemoCodecs(const std::vector<std::string>& names);

// The codec of `kind` over the demo's model and artifacts (`predictor`: spec's, may be
// null otherwise). Errors: those of PrefixCodec::CreateRaw/CreateSpec/CreateDckv.
Result<std::unique_ptr<PrefixCodec>> MakeDemoCodec(PrefixCodecKind kind, const model::Model& model,
                                                   std::shared_ptr<const model::SpecPredictor> predictor,
                                                   const DemoArtifacts& artifacts, const PrefixCodecOptions& options);

// The text whose XXH3-64 names the cached dckv artifact (see the top): the v1 text
// (model, calibration budget and files, rate, group, raw head/tail) and, when set,
// "|rows=<engine_name>-<kv_dtype>-unrope-v1", "|conditional=embed128-checkerboard",
// "|weights=<XXH3-64 of the file's bytes>|floor=0.01". Errors: NotFound when the weights
// file cannot be read.
Result<std::string> DckvArtifactKeyText(const Digest256& model_fingerprint,
                                        const DemoArtifactOptions& options);

// `predictor` may be null when !want_spec.
Result<DemoArtifacts> LoadOrCalibrateArtifacts(const model::Model& model,
                                               const Digest256& model_fingerprint,
                                               const model::SpecPredictor* predictor,
                                               bool want_spec, bool want_dckv,
                                               const DemoArtifactOptions& options);

}  // namespace kvstash::demo
