#include "benchmarks/codec/spec_bench_workload.h"

#include <filesystem>

#include "common/file_bytes.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/kv_cache.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"

namespace kvstash::spec {

PredictedChunk SpecBenchWorkload::Prediction(size_t c) const {
  const auto b = static_cast<uint32_t>(c * kChunkTokens);
  return PredictedSlice(prediction, layout, b, b + kChunkTokens);
}

Status BuildSpecBenchWorkload(const std::string& source_dir, int threads, SpecBenchWorkload* w) {
  const std::string model_path = source_dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model_path)) return Status::NotFound(model_path + " absent: run scripts/setup.sh");
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(model_path));
  KVSTASH_ASSIGN_OR_RETURN(auto art_bytes, ReadFileBytes(source_dir + "/tests/determinism/fixtures/spec.kvsa"));
  KVSTASH_ASSIGN_OR_RETURN(SpecArtifact art, SpecArtifact::Parse(art_bytes));
  w->artifact = std::make_unique<SpecArtifact>(std::move(art));
  w->artifact_digest = w->artifact->Digest();
  w->layout = {m->config.n_layers, m->config.n_kv_heads, m->config.head_dim, DType::kBF16};
  constexpr uint32_t kTokens = SpecBenchWorkload::kPrefixTokens;
  constexpr uint32_t kChunk = SpecBenchWorkload::kChunkTokens;
  KVSTASH_ASSIGN_OR_RETURN(auto corpus,
                           model::LoadCorpus(*m->tokenizer, model::CorpusSplit::kEvaluation, kTokens, kTokens));
  const std::vector<uint32_t>& tokens = corpus.documents.at(0).tokens;
  if (tokens.size() != kTokens) return Status::NotFound("evaluation corpus shorter than the prefix");
  model::KvCache cache = model::KvCache::ForModel(m->config);
  model::PrefillOptions fo;
  fo.logits = model::PrefillOptions::Logits::kNone;
  KVSTASH_RETURN_IF_ERROR(model::Prefill(*m, tokens, &cache, fo).status());
  model::SpecPredictorOptions po;
  po.threads = threads;
  KVSTASH_ASSIGN_OR_RETURN(auto predictor, model::SpecPredictor::Create(*m, po));
  KVSTASH_RETURN_IF_ERROR(predictor->Run(tokens, &w->prediction));
  for (uint32_t b = 0; b < kTokens; b += kChunk) {
    KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, model::ToKvChunk(cache, b, b + kChunk, DType::kBF16));
    w->raw_bytes += chunk.data.size();
    KVSTASH_ASSIGN_OR_RETURN(auto payload, EncodeSpecPayload(*w->artifact, chunk.view(), w->Prediction(b / kChunk),
                                                             SpecBenchWorkload::kFingerprint, b, threads));
    w->payloads.push_back(std::move(payload));
  }
  const uint64_t n = w->layout.ScalarsPerTensor(kChunk);
  w->scalars_per_stream = n;
  std::vector<uint16_t> pred(n);
  for (size_t c = 0; c < w->payloads.size(); ++c) {
    const PredictedChunk p = w->Prediction(c);
    KVSTASH_ASSIGN_OR_RETURN(SpecPayloadParts parts,
                             SplitSpecPayload(*w->artifact, w->payloads[c], p, SpecBenchWorkload::kFingerprint));
    for (uint32_t st = 0; st < parts.streams.size(); ++st) {
      SpecBenchWorkload::Stream x;
      x.bytes = parts.streams[st];
      x.mu = st % 2 == 0 ? p.k[st / 2] : p.v[st / 2];
      x.log2_sigma = w->artifact->Log2Sigma(st / 2, st % 2);
      x.table.resize(n);
      KVSTASH_RETURN_IF_ERROR(
          ComputeContexts(w->artifact->contexts, std::span(x.mu, n), x.log2_sigma, 1.0f, pred, x.table));
      w->streams.push_back(std::move(x));
    }
  }
  return Status::Ok();
}

}  // namespace kvstash::spec
