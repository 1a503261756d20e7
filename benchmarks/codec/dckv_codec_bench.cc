// Google Benchmark of the dckv codec on real KV: SmolLM2-135M prefills one evaluation
// document of 1,536 tokens (real text, model/text_corpus.h) and the prefix is cut into
// 256-token chunks as `kvstash demo` stores it (raw head in the first chunk, raw tail
// in the last). Measured: Encode and Decode of the whole prefix (all chunks, token
// ids given), and the steps of Decode (ParsePayload = rANS, Reconstruct = conditional
// passes + transform + RoPE + bf16) and Quantize (Encode without Reconstruct and
// rANS). The argument is DckvCodec::set_threads (OpenBLAS keeps its own threads).
// Throughput is bytes of bf16 KV (SetBytesProcessed).
//
// Set-up and artifact: dckv_bench_setup.h. Skips with a message when the model is absent.
// Run: build/benchmarks/codec/dckv_codec_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

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

BENCHMARK(BM_DckvEncode)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvDecode)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvParsePayload)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvQuantize)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvstash::dckv
