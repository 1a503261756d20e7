// Google Benchmark of the CPU spec decode with the predictor excluded, on real KV:
// SmolLM2-135M prefills the first 1,536-token evaluation document
// (model/corpus/text_corpus.h) in 256-token bf16 chunks; the default spec predictor
// (W8A16-g128) runs once over the same tokens in the setup; each chunk is spec-coded
// with the artifact of the determinism manifest (tests/determinism/fixtures/spec.kvsa).
// Throughput is bytes of decoded bf16 KV (the "MB/s per core": run with 1 thread).
//   BM_SpecDecode    spec::DecodeSpecPayload with the argument's threads: parsing, the
//                    prediction digest, contexts, rANS, value rebuild, content checksum.
//   BM_SpecContexts  spec::ComputeContexts of every stream (the per-scalar model choice).
//   BM_SpecRans      entropy::RansDecodeSegmented of every stream, tables precomputed.
// KVSTASH_CPU_PATH=scalar|avx2|avx512 picks the rANS path as everywhere else. Without
// the model every row skips with a message. Run: build/benchmarks/codec/spec_decode_bench
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "codec/entropy/rans_segments.h"
#include "codec/spec/spec_codec.h"
#include "common/file_bytes.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/kv_cache.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::spec {
namespace {

constexpr uint32_t kPrefixTokens = 1536;
constexpr uint32_t kChunkTokens = 256;
constexpr Digest256 kFingerprint = {9};

struct Setup {
  std::string error;  // non-empty: every benchmark skips with it
  std::unique_ptr<SpecArtifact> artifact;
  Digest256 artifact_digest{};  // artifact->Digest(), once (as PrefixCodec holds it)
  model::PredictorCache prediction;
  KvLayout layout;
  std::vector<std::vector<uint8_t>> payloads;
  uint64_t raw_bytes = 0;
  uint64_t scalars = 0;  // per stream
  struct Stream {
    std::span<const uint8_t> bytes;
    const float* mu = nullptr;
    std::span<const float> log2_sigma;
    std::vector<uint16_t> table;
  };
  std::vector<Stream> streams;
};

PredictedChunk Slice(const Setup& s, uint32_t b) { return PredictedSlice(s.prediction, s.layout, b, b + kChunkTokens); }

Status Build(Setup* s) {
  const std::string src = KVSTASH_SOURCE_DIR;
  const std::string model_path = src + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model_path)) return Status::NotFound(model_path + " absent: run scripts/setup.sh");
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(model_path));
  KVSTASH_ASSIGN_OR_RETURN(auto art_bytes, ReadFileBytes(src + "/tests/determinism/fixtures/spec.kvsa"));
  KVSTASH_ASSIGN_OR_RETURN(SpecArtifact art, SpecArtifact::Parse(art_bytes));
  s->artifact = std::make_unique<SpecArtifact>(std::move(art));
  s->artifact_digest = s->artifact->Digest();
  s->layout = {m->config.n_layers, m->config.n_kv_heads, m->config.head_dim, DType::kBF16};
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*m->tokenizer, model::CorpusSplit::kEvaluation,
                                                          kPrefixTokens, kPrefixTokens));
  const std::vector<uint32_t>& tokens = corpus.documents.at(0).tokens;
  if (tokens.size() != kPrefixTokens) return Status::NotFound("evaluation corpus shorter than the prefix");
  model::KvCache cache = model::KvCache::ForModel(m->config);
  model::PrefillOptions fo;
  fo.logits = model::PrefillOptions::Logits::kNone;
  KVSTASH_RETURN_IF_ERROR(model::Prefill(*m, tokens, &cache, fo).status());
  model::SpecPredictorOptions po;
  po.threads = 2;
  KVSTASH_ASSIGN_OR_RETURN(auto predictor, model::SpecPredictor::Create(*m, po));
  KVSTASH_RETURN_IF_ERROR(predictor->Run(tokens, &s->prediction));
  for (uint32_t b = 0; b < kPrefixTokens; b += kChunkTokens) {
    KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, model::ToKvChunk(cache, b, b + kChunkTokens, DType::kBF16));
    s->raw_bytes += chunk.data.size();
    KVSTASH_ASSIGN_OR_RETURN(auto payload, EncodeSpecPayload(*s->artifact, chunk.view(), Slice(*s, b), kFingerprint, b, 2));
    s->payloads.push_back(std::move(payload));
  }
  const uint64_t n = s->layout.ScalarsPerTensor(kChunkTokens);
  s->scalars = n;
  std::vector<uint16_t> pred(n);
  for (size_t c = 0; c < s->payloads.size(); ++c) {
    const PredictedChunk p = Slice(*s, static_cast<uint32_t>(c) * kChunkTokens);
    KVSTASH_ASSIGN_OR_RETURN(SpecPayloadParts parts, SplitSpecPayload(*s->artifact, s->payloads[c], p, kFingerprint));
    for (uint32_t st = 0; st < parts.streams.size(); ++st) {
      Setup::Stream x;
      x.bytes = parts.streams[st];
      x.mu = st % 2 == 0 ? p.k[st / 2] : p.v[st / 2];
      x.log2_sigma = s->artifact->Log2Sigma(st / 2, st % 2);
      x.table.resize(n);
      KVSTASH_RETURN_IF_ERROR(ComputeContexts(s->artifact->contexts, std::span(x.mu, n), x.log2_sigma, 1.0f, pred, x.table));
      s->streams.push_back(std::move(x));
    }
  }
  return Status::Ok();
}

const Setup& Get() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    if (Status st = Build(s); !st.ok()) s->error = st.ToString();
    return s;
  }();
  return *setup;
}

void BM_SpecDecode(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    for (size_t c = 0; c < s.payloads.size(); ++c) {
      auto chunk = DecodeSpecPayload(*s.artifact, s.artifact_digest, s.payloads[c],
                                     Slice(s, static_cast<uint32_t>(c) * kChunkTokens), kFingerprint, threads);
      if (!chunk.ok()) return state.SkipWithError(chunk.status().ToString().c_str());
      benchmark::DoNotOptimize(chunk->data.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

void BM_SpecContexts(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  std::vector<uint16_t> pred(s.scalars), table(s.scalars);
  for (auto _ : state) {
    for (const Setup::Stream& x : s.streams) {
      if (Status st = ComputeContexts(s.artifact->contexts, std::span(x.mu, s.scalars), x.log2_sigma, 1.0f, pred, table);
          !st.ok()) {
        return state.SkipWithError(st.ToString().c_str());
      }
      benchmark::DoNotOptimize(table.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

void BM_SpecRans(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  std::vector<uint16_t> symbols(s.scalars);
  for (auto _ : state) {
    for (const Setup::Stream& x : s.streams) {
      if (Status st = entropy::RansDecodeSegmented(x.bytes, x.table, *s.artifact->tables, symbols); !st.ok()) {
        return state.SkipWithError(st.ToString().c_str());
      }
      benchmark::DoNotOptimize(symbols.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

BENCHMARK(BM_SpecDecode)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpecContexts)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpecRans)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvstash::spec
