// Google Benchmark of the dckv codec on real KV: SmolLM2-135M prefills one evaluation
// document of 1,536 tokens (real text, model/corpus/text_corpus.h) and the prefix is cut into
// 256-token chunks as `kvstash-demo` stores it (raw head in the first chunk, raw tail
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
// Set-up and artifact: dckv_bench_setup.h. Skips with a message when the model is absent.
// Run: build/benchmarks/codec/dckv_codec_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "benchmarks/codec/dckv_bench_setup.h"

namespace kvstash::dckv {
namespace {

using bench::Get;
using bench::kChunkTokens;
using bench::kFingerprint;
using bench::kPrefixTokens;
using bench::Setup;

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

void BM_DckvDecode(benchmark::State& state) { bench::DecodePrefixOnCpu(state); }

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

// The quantised prefix and a copy of the codec with decoder nets (BM_DckvReconstruct).
struct NetSetup {
  std::string error;
  std::unique_ptr<DckvCodec> codec_net;
  std::vector<DckvQuantized> quantized;
};

constexpr uint32_t kNetHidden = 256;

Status BuildNet(const Setup& s, NetSetup* n) {
  DckvArtifact with_net = s.codec->artifact();
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
  n->codec_net = std::make_unique<DckvCodec>(std::move(codec_net));
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    KVSTASH_ASSIGN_OR_RETURN(auto q, s.codec->Quantize(s.chunks[c].view(), s.ids[c],
                                                       static_cast<uint32_t>(c * kChunkTokens), kPrefixTokens));
    n->quantized.push_back(std::move(q));
  }
  return Status::Ok();
}

const NetSetup& GetNet(const Setup& s) {
  static const NetSetup* net = [&] {
    auto* n = new NetSetup;
    if (const Status st = BuildNet(s, n); !st.ok()) n->error = st.ToString();
    return n;
  }();
  return *net;
}

// Reconstruct without (net 0) and with (net 1) decoder correction nets.
void BM_DckvReconstruct(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const NetSetup& n = GetNet(s);
  if (!n.error.empty()) return state.SkipWithError(n.error.c_str());
  DckvCodec& codec = state.range(0) ? *n.codec_net : *s.codec;
  codec.set_threads(static_cast<uint32_t>(state.range(1)));
  for (auto _ : state) {
    for (size_t c = 0; c < n.quantized.size(); ++c) {
      auto chunk = codec.Reconstruct(n.quantized[c], static_cast<uint32_t>(c * kChunkTokens));
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
