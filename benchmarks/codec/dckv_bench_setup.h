// The real-KV set-up shared by the dckv benchmarks (dckv_codec_bench.cc, the CPU codec;
// dckv_decode_gpu_bench.cc, the CUDA decoder against it): SmolLM2-135M prefills one
// evaluation document of 1,536 tokens (real text, model/corpus/text_corpus.h), cut into
// 256-token chunks as `kvstash-demo` stores them (raw head in the first chunk, raw tail
// in the last), each encoded with its token ids. The artifact:
// KVSTASH_DCKV_ARTIFACT=<file.kvda> (e.g. the demo's cached one in .cache/kvstash-demo/),
// else one calibrated here (group 6, target 16x, 2,048 calibration tokens, as the demo).
// Get() builds it once per process; a non-empty Setup::error (e.g. the model is absent)
// means the benchmarks skip with it. Needs KVSTASH_SOURCE_DIR defined by the build.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "model/forward/kv_export.h"
#include "model/formats/model_loader.h"
#include "model/forward/prefill.h"
#include "model/corpus/text_corpus.h"

namespace kvstash::dckv::bench {

inline constexpr uint32_t kPrefixTokens = 1536;
inline constexpr uint32_t kChunkTokens = 256;
inline constexpr uint32_t kCalTokens = 2048;
inline constexpr Digest256 kFingerprint = {7};

struct Setup {
  std::string error;  // non-empty: benchmarks skip with it
  std::unique_ptr<DckvCodec> codec;
  std::vector<KvChunk> chunks;
  std::vector<std::vector<uint32_t>> ids;
  std::vector<std::vector<uint8_t>> payloads;
  uint64_t raw_bytes = 0;
};

inline Result<DckvArtifact> Calibrate(const model::Model& m) {
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kCalibration,
                                                          kCalTokens, kCalTokens));
  const auto& mc = m.config;
  auto rows = DckvRows::ForShape(mc.n_layers, mc.n_kv_heads, mc.head_dim);
  for (const auto& d : corpus.documents) {
    model::KvCache cache = model::KvCache::ForModel(mc);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    po.keep_pre_rope_k = true;
    KVSTASH_ASSIGN_OR_RETURN(auto pr, model::Prefill(m, d.tokens, &cache, po));
    for (uint32_t l = 0; l < mc.n_layers; ++l) {
      rows.k[l].insert(rows.k[l].end(), pr.k_pre_rope[l].begin(), pr.k_pre_rope[l].end());
      rows.v[l].insert(rows.v[l].end(), cache.v[l].begin(), cache.v[l].end());
    }
    rows.rows += d.tokens.size();
  }
  KVSTASH_ASSIGN_OR_RETURN(auto basis, FitDckvBasis(rows, 6));
  DckvRateOptions ro;
  ro.target_ratio = 16;
  ro.rope_theta = mc.rope_theta;
  return MakeDckvArtifact(basis, ro);
}

inline Result<DckvArtifact> LoadArtifact(const model::Model& m) {
  const char* path = std::getenv("KVSTASH_DCKV_ARTIFACT");
  if (path == nullptr || *path == '\0') return Calibrate(m);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(std::string("cannot read ") + path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return DckvArtifact::Parse(bytes);
}

inline Status Build(Setup* s) {
  const std::string model_path = std::string(KVSTASH_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model_path)) return Status::NotFound(model_path + " absent: run scripts/setup.sh");
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(model_path));
  KVSTASH_ASSIGN_OR_RETURN(auto artifact, LoadArtifact(*m));
  KVSTASH_ASSIGN_OR_RETURN(auto codec, DckvCodec::Create(std::move(artifact)));
  s->codec = std::make_unique<DckvCodec>(std::move(codec));
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*m->tokenizer, model::CorpusSplit::kEvaluation,
                                                          kPrefixTokens, kPrefixTokens));
  const std::vector<uint32_t>& tokens = corpus.documents.at(0).tokens;
  if (tokens.size() != kPrefixTokens) return Status::NotFound("evaluation corpus shorter than the prefix");
  model::KvCache cache = model::KvCache::ForModel(m->config);
  model::PrefillOptions po;
  po.logits = model::PrefillOptions::Logits::kNone;
  KVSTASH_RETURN_IF_ERROR(model::Prefill(*m, tokens, &cache, po).status());
  for (uint32_t b = 0; b < kPrefixTokens; b += kChunkTokens) {
    KVSTASH_ASSIGN_OR_RETURN(auto chunk, model::ToKvChunk(cache, b, b + kChunkTokens, DType::kBF16));
    s->raw_bytes += chunk.data.size();
    s->ids.emplace_back(tokens.begin() + b, tokens.begin() + b + kChunkTokens);
    KVSTASH_ASSIGN_OR_RETURN(auto payload, s->codec->Encode(chunk.view(), s->ids.back(), b, kPrefixTokens,
                                                            kFingerprint));
    s->payloads.push_back(std::move(payload));
    s->chunks.push_back(std::move(chunk));
  }
  return Status::Ok();
}

inline const Setup& Get() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    const Status st = Build(s);
    if (!st.ok()) s->error = st.ToString();
    return s;
  }();
  return *setup;
}

// The CPU baseline both benches time: DckvCodec::Decode of the whole prefix with
// state.range(0) threads; throughput in bf16 KV bytes.
inline void DecodePrefixOnCpu(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  s.codec->set_threads(static_cast<uint32_t>(state.range(0)));
  for (auto _ : state) {
    for (const auto& p : s.payloads) {
      auto chunk = s.codec->Decode(p, kFingerprint);
      if (!chunk.ok()) return state.SkipWithError(chunk.status().ToString().c_str());
      benchmark::DoNotOptimize(chunk->data.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

}  // namespace kvstash::dckv::bench
