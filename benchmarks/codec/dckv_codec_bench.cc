// Google Benchmark of the dckv codec on real KV: SmolLM2-135M prefills one evaluation
// document of 1,536 tokens (real text, model/text_corpus.h) and the prefix is cut into
// 256-token chunks as `kvstash demo` stores it (raw head in the first chunk, raw tail
// in the last). Measured: Encode and Decode of the whole prefix (all chunks, token
// ids given), and the steps of Decode (ParsePayload = rANS, Reconstruct = conditional
// passes + transform + RoPE + bf16) and Quantize (Encode without Reconstruct and
// rANS). The argument is DckvCodec::set_threads (OpenBLAS keeps its own threads).
// BM_DckvReconstruct/<net>/<threads>: Reconstruct of the quantised prefix with the
// artifact as is (net 0) and with a decoder correction net of 256 hidden units added
// to every group (net 1; random small weights, timing only: the cost of the net's
// arithmetic, codec/dckv/dckv_correction.h).
// Throughput is bytes of bf16 KV (SetBytesProcessed).
//
// The artifact: KVSTASH_DCKV_ARTIFACT=<file.kvda> (e.g. the demo's cached one in
// .cache/kvstash-demo/), else one calibrated here (group 6, target 16x, 2,048
// calibration tokens, as the demo). Skips with a message when the model is absent.
// Run: build/benchmarks/codec/dckv_codec_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "model/kv_export.h"
#include "model/model_loader.h"
#include "model/prefill.h"
#include "model/text_corpus.h"

namespace kvstash::dckv {
namespace {

constexpr uint32_t kPrefixTokens = 1536;
constexpr uint32_t kChunkTokens = 256;
constexpr uint32_t kCalTokens = 2048;
constexpr Digest256 kFingerprint = {7};
constexpr uint32_t kNetHidden = 256;

struct Setup {
  std::string error;  // non-empty: benchmarks skip with it
  std::unique_ptr<DckvCodec> codec;
  std::unique_ptr<DckvCodec> codec_net;  // the same artifact plus decoder nets (256 hidden)
  std::vector<DckvQuantized> quantized;
  std::vector<KvChunk> chunks;
  std::vector<std::vector<uint32_t>> ids;
  std::vector<std::vector<uint8_t>> payloads;
  uint64_t raw_bytes = 0;
};

Result<DckvArtifact> Calibrate(const model::Model& m) {
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kCalibration,
                                                          kCalTokens, kCalTokens));
  const auto& mc = m.config;
  DckvRows rows;
  rows.n_layers = mc.n_layers;
  rows.n_kv_heads = mc.n_kv_heads;
  rows.head_dim = mc.head_dim;
  rows.k.resize(mc.n_layers);
  rows.v.resize(mc.n_layers);
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

Result<DckvArtifact> LoadArtifact(const model::Model& m) {
  const char* path = std::getenv("KVSTASH_DCKV_ARTIFACT");
  if (path == nullptr || *path == '\0') return Calibrate(m);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(std::string("cannot read ") + path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return DckvArtifact::Parse(bytes);
}

Status Build(Setup* s) {
  const std::string model_path = std::string(KVSTASH_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model_path)) return Status::NotFound(model_path + " absent: run scripts/setup.sh");
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(model_path));
  KVSTASH_ASSIGN_OR_RETURN(auto artifact, LoadArtifact(*m));
  DckvArtifact with_net = artifact;
  std::mt19937 rng(1);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (auto& g : with_net.groups) {
    DckvNet& net = g.decoder_net;
    net.hidden = kNetHidden;
    net.w1.resize(static_cast<size_t>(kNetHidden) * g.n_active());
    net.b1.resize(kNetHidden);
    net.w2.resize(static_cast<size_t>(g.dims) * kNetHidden);
    net.b2.assign(g.dims, 0.0f);
    for (float& v : net.w1) v = n01(rng) * 0.01f;
    for (float& v : net.b1) v = n01(rng);
    for (float& v : net.w2) v = n01(rng) * 1e-3f;
    for (float& m : g.mean) m = m == 0.0f ? 0.0f : m;  // no -0.0 in the mean of a group with a net
  }
  KVSTASH_ASSIGN_OR_RETURN(auto codec_net, DckvCodec::Create(std::move(with_net)));
  s->codec_net = std::make_unique<DckvCodec>(std::move(codec_net));
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
    KVSTASH_ASSIGN_OR_RETURN(auto q, s->codec->Quantize(chunk.view(), s->ids.back(), b, kPrefixTokens));
    s->quantized.push_back(std::move(q));
    s->chunks.push_back(std::move(chunk));
  }
  return Status::Ok();
}

const Setup& Get() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    const Status st = Build(s);
    if (!st.ok()) s->error = st.ToString();
    return s;
  }();
  return *setup;
}

void BM_DckvEncode(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  s.codec->set_threads(static_cast<uint32_t>(state.range(0)));
  for (auto _ : state) {
    for (size_t c = 0; c < s.chunks.size(); ++c) {
      auto p = s.codec->Encode(s.chunks[c].view(), s.ids[c], static_cast<uint32_t>(c * kChunkTokens),
                               kPrefixTokens, kFingerprint);
      if (!p.ok()) return state.SkipWithError(p.status().ToString().c_str());
      benchmark::DoNotOptimize(p->data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

void BM_DckvDecode(benchmark::State& state) {
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

// The rANS part of Decode alone.
void BM_DckvParsePayload(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  for (auto _ : state) {
    for (const auto& p : s.payloads) {
      uint32_t offset = 0;
      auto q = s.codec->ParsePayload(p, kFingerprint, &offset);
      if (!q.ok()) return state.SkipWithError(q.status().ToString().c_str());
      benchmark::DoNotOptimize(q->symbols.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

// The encoder's analysis half (inverse RoPE, projection, quantisation; no rANS).
void BM_DckvQuantize(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  s.codec->set_threads(static_cast<uint32_t>(state.range(0)));
  for (auto _ : state) {
    for (size_t c = 0; c < s.chunks.size(); ++c) {
      auto q = s.codec->Quantize(s.chunks[c].view(), s.ids[c], static_cast<uint32_t>(c * kChunkTokens),
                                 kPrefixTokens);
      if (!q.ok()) return state.SkipWithError(q.status().ToString().c_str());
      benchmark::DoNotOptimize(q->symbols.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

// Reconstruct without (net 0) and with (net 1) decoder correction nets.
void BM_DckvReconstruct(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  DckvCodec& codec = state.range(0) ? *s.codec_net : *s.codec;
  codec.set_threads(static_cast<uint32_t>(state.range(1)));
  for (auto _ : state) {
    for (size_t c = 0; c < s.quantized.size(); ++c) {
      auto chunk = codec.Reconstruct(s.quantized[c], static_cast<uint32_t>(c * kChunkTokens));
      if (!chunk.ok()) return state.SkipWithError(chunk.status().ToString().c_str());
      benchmark::DoNotOptimize(chunk->data.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

BENCHMARK(BM_DckvReconstruct)->Args({0, 1})->Args({1, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvEncode)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvDecode)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvParsePayload)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvQuantize)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvstash::dckv
