// The real KV that the spec benchmarks code (`kvstash-bench codec --codec spec` and
// `--codec lossless-peers`): documents of the real-text corpus (model/corpus) prefilled
// by the fp32 target and by the spec predictor, cut into chunks; the fp8 scales a
// deployment would fix; the spec artifact calibrated on such chunks.
//
// Times: wall seconds (steady clock) and process CPU seconds (every thread of the
// process; the predictor runs on SpecBenchOptions::threads threads).
// Thread-safety: not reentrant (the target's BLAS and the predictor use thread pools).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/drivers/spec_bench.h"
#include "codec/spec/spec_artifact.h"
#include "codec/spec/spec_codec.h"
#include "kvstash/kv_chunk.h"
#include "model/corpus/text_corpus.h"
#include "model/forward/kv_cache.h"
#include "model/forward/model.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::bench {

struct DocRun {
  std::vector<uint32_t> tokens;
  model::KvCache target;        // fp32 target runtime
  model::PredictorCache pred;   // our deterministic predictor
  model::KvCache published;     // FP8-block predictor (spec-published row); empty without it
};

struct ChunkRef {
  const DocRun* doc;
  uint32_t begin, end;
};

// Time spent producing the documents' KV.
struct DocRunTimes {
  double prefill_s = 0;        // wall, fp32 target prefill
  double predictor_s = 0;      // wall, spec predictor
  double predictor_cpu_s = 0;  // process CPU time of the spec predictor
};

// Every full chunk of C tokens of every document, in order.
std::vector<ChunkRef> Chunks(const std::vector<DocRun>& docs, uint32_t C);

// Prefills each document with the target, the predictor and (when fp8_model is not
// null) the FP8-block model; adds the times to *times.
Result<std::vector<DocRun>> RunDocs(const model::Model& target, const model::Model* fp8_model,
                                    const model::SpecPredictor& predictor, const model::Corpus& corpus,
                                    DocRunTimes* times);

// fp8: one fixed scale per (layer, K/V) from the calibration chunks (amax / 448), as a
// deployment fixes k_scale / v_scale; K then V per layer.
std::vector<float> Fp8Scales(const std::vector<ChunkRef>& cal_chunks, const KvLayout& L);

// Two-pass calibration of a spec artifact on the calibration chunks (cal[i] is
// refs[i] in L.dtype), against the predictor's output or, when `fixed` is given,
// against that one prediction.
Result<spec::SpecArtifact> Calibrate(const KvLayout& L, const std::vector<KvChunk>& cal,
                                     const std::vector<ChunkRef>& refs, const model::SpecPredictor& predictor,
                                     const std::string& variant, const spec::PredictedChunk* fixed);

// The predictor options the bench options describe.
model::SpecPredictorOptions PredictorOptions(const SpecBenchOptions& o);

// Everything a spec benchmark codes: the target, the predictor, the calibration and
// evaluation documents run through them (and through the FP8-block model when asked),
// and their chunks. Held by pointer: the chunks point into the documents.
struct SpecBenchKv {
  std::unique_ptr<model::Model> target;
  std::unique_ptr<model::Model> fp8_model;  // null unless with_published
  model::SpecPredictorOptions predictor_options;
  std::unique_ptr<model::SpecPredictor> predictor;
  std::vector<DocRun> cal_docs, eval_docs;
  DocRunTimes cal_times, eval_times;
  std::vector<ChunkRef> cal_chunks, eval_chunks;
};

// Loads options.model_path and the corpora (options.cal_tokens, eval_tokens,
// doc_tokens) and runs them; `what` names the bench in the log. Errors: those of the
// model and corpus loaders and the runs; InvalidArgument for a model without a
// tokenizer or too little text for one chunk of each split.
Result<std::unique_ptr<SpecBenchKv>> LoadSpecBenchKv(const SpecBenchOptions& options, bool with_published,
                                                     const std::string& what);

}  // namespace kvstash::bench
