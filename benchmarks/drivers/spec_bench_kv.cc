#include "benchmarks/drivers/spec_bench_kv.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include "codec/spec/spec_calibration.h"
#include "common/logging.h"
#include "model/formats/model_loader.h"
#include "model/predictor/fp8_block_model.h"
#include "model/forward/prefill.h"

namespace kvstash::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

std::vector<ChunkRef> Chunks(const std::vector<DocRun>& docs, uint32_t C) {
  std::vector<ChunkRef> out;
  for (const DocRun& d : docs) {
    for (uint32_t b = 0; b + C <= d.tokens.size(); b += C) out.push_back({&d, b, b + C});
  }
  return out;
}

Result<std::vector<DocRun>> RunDocs(const model::Model& target, const model::Model* fp8_model,
                                    const model::SpecPredictor& predictor, const model::Corpus& corpus,
                                    DocRunTimes* times) {
  std::vector<DocRun> docs;
  for (const auto& d : corpus.documents) {
    DocRun r;
    r.tokens = d.tokens;
    r.target = model::KvCache::ForModel(target.config);
    r.published = model::KvCache::ForModel(target.config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    const auto t0 = Clock::now();
    KVSTASH_RETURN_IF_ERROR(model::Prefill(target, r.tokens, &r.target, po).status());
    const auto t1 = Clock::now();
    const double cpu0 = ProcessCpuSeconds();
    KVSTASH_RETURN_IF_ERROR(predictor.Run(r.tokens, &r.pred));
    const double cpu1 = ProcessCpuSeconds();
    const auto t2 = Clock::now();
    if (fp8_model != nullptr) {
      KVSTASH_RETURN_IF_ERROR(model::Prefill(*fp8_model, r.tokens, &r.published, po).status());
    }
    times->prefill_s += Secs(t0, t1);
    times->predictor_s += Secs(t1, t2);
    times->predictor_cpu_s += cpu1 - cpu0;
    docs.push_back(std::move(r));
  }
  return docs;
}

std::vector<float> Fp8Scales(const std::vector<ChunkRef>& cal_chunks, const KvLayout& L) {
  const size_t row = static_cast<size_t>(L.n_kv_heads) * L.head_dim;
  std::vector<float> scales(2 * L.n_layers, 0.0f);
  for (const ChunkRef& c : cal_chunks) {
    for (uint32_t l = 0; l < L.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const auto& v = kv ? c.doc->target.v[l] : c.doc->target.k[l];
        for (size_t i = c.begin * row; i < c.end * row; ++i) {
          scales[2 * l + kv] = std::max(scales[2 * l + kv], std::fabs(v[i]) / kFp8E4M3Max);
        }
      }
    }
  }
  for (float& s : scales) s = s > 0.0f ? s : 1.0f;
  return scales;
}

Result<spec::SpecArtifact> Calibrate(const KvLayout& L, const std::vector<KvChunk>& cal,
                                     const std::vector<ChunkRef>& refs,
                                     const model::SpecPredictor& predictor,
                                     const std::string& variant,
                                     const spec::PredictedChunk* fixed) {
  spec::CalibrationOptions co;
  co.contexts.dtype = L.dtype;
  co.predictor_digest = fixed ? 0 : predictor.Digest();
  co.predictor_variant = variant;
  KVSTASH_ASSIGN_OR_RETURN(auto cb, spec::SpecCalibrator::Create(L, co));
  auto prediction = [&](size_t i) {
    return fixed ? *fixed : spec::PredictedSlice(refs[i].doc->pred, L, refs[i].begin, refs[i].end);
  };
  for (size_t i = 0; i < cal.size(); ++i) KVSTASH_RETURN_IF_ERROR(cb.AddVariance(cal[i].view(), prediction(i)));
  KVSTASH_RETURN_IF_ERROR(cb.FreezeSigma());
  for (size_t i = 0; i < cal.size(); ++i) KVSTASH_RETURN_IF_ERROR(cb.AddHistogram(cal[i].view(), prediction(i)));
  return cb.Build();
}

model::SpecPredictorOptions PredictorOptions(const SpecBenchOptions& o) {
  model::SpecPredictorOptions po;
  po.group = o.predictor_group;
  po.activation_bits = o.predictor_activation_bits;
  po.threads = o.threads;
  if (o.predictor_arithmetic == "ggml") po.arithmetic = model::SpecPredictorOptions::Arithmetic::kGgml;
  po.kv_dtype = o.predictor_kv_dtype;
  if (o.predictor_int8_attention) po.attention = model::SpecPredictorOptions::Attention::kInt8;
  return po;
}

Result<std::unique_ptr<SpecBenchKv>> LoadSpecBenchKv(const SpecBenchOptions& o, bool with_published,
                                                     const std::string& what) {
  auto kv = std::make_unique<SpecBenchKv>();
  KVSTASH_ASSIGN_OR_RETURN(kv->target, model::LoadModel(o.model_path));
  if (with_published) {
    KVSTASH_ASSIGN_OR_RETURN(kv->fp8_model, model::LoadModel(o.model_path));
    KVSTASH_RETURN_IF_ERROR(model::QuantizeModelFp8Block(kv->fp8_model.get()));
  }
  if (!kv->target->tokenizer) return Status::InvalidArgument("bench codec: the model file has no tokenizer");
  kv->predictor_options = PredictorOptions(o);
  KVSTASH_ASSIGN_OR_RETURN(kv->predictor, model::SpecPredictor::Create(*kv->target, kv->predictor_options));
  KVSTASH_ASSIGN_OR_RETURN(auto cal_corpus, model::LoadCorpus(*kv->target->tokenizer, model::CorpusSplit::kCalibration,
                                                              o.doc_tokens, o.cal_tokens));
  KVSTASH_ASSIGN_OR_RETURN(auto eval_corpus, model::LoadCorpus(*kv->target->tokenizer, model::CorpusSplit::kEvaluation,
                                                               o.doc_tokens, o.eval_tokens));
  KVSTASH_LOG_INFO("bench codec {}: {} calibration and {} evaluation tokens, predictor {}", what,
                   cal_corpus.TotalTokens(), eval_corpus.TotalTokens(), kv->predictor_options.VariantName());
  KVSTASH_ASSIGN_OR_RETURN(kv->cal_docs,
                           RunDocs(*kv->target, kv->fp8_model.get(), *kv->predictor, cal_corpus, &kv->cal_times));
  KVSTASH_ASSIGN_OR_RETURN(kv->eval_docs,
                           RunDocs(*kv->target, kv->fp8_model.get(), *kv->predictor, eval_corpus, &kv->eval_times));
  kv->cal_chunks = Chunks(kv->cal_docs, o.chunk_tokens);
  kv->eval_chunks = Chunks(kv->eval_docs, o.chunk_tokens);
  if (kv->cal_chunks.empty() || kv->eval_chunks.empty()) {
    return Status::InvalidArgument("bench codec: not enough text for one chunk");
  }
  return kv;
}

}  // namespace kvstash::bench
