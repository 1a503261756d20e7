// Google Benchmark of the CPU spec decode with the predictor excluded, on real KV: the
// workload of benchmarks/codec/spec_bench_workload.h (SmolLM2-135M's KV of a 1,536-token
// evaluation document in 256-token bf16 chunks, spec-coded; the predictor runs once, in
// the setup, on 2 threads).
// Throughput is bytes of decoded bf16 KV (the "MB/s per core": run with 1 thread).
//   BM_SpecDecode    spec::DecodeSpecPayload with the argument's threads: parsing, the
//                    prediction digest, contexts, rANS, value rebuild, content checksum.
//   BM_SpecContexts  spec::ComputeContexts of every stream (the per-scalar model choice).
//   BM_SpecRans      entropy::RansDecodeSegmented of every stream, tables precomputed.
// KVSTASH_CPU_PATH=scalar|avx2|avx512 picks the rANS path as everywhere else. Without
// the model every row skips with a message. Run: build/benchmarks/codec/spec_decode_bench
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "benchmarks/codec/spec_bench_workload.h"
#include "codec/entropy/rans_segments.h"

namespace kvstash::spec {
namespace {

struct Setup {
  std::string error;  // non-empty: every benchmark skips with it
  SpecBenchWorkload w;
};

const Setup& Get() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    if (Status st = BuildSpecBenchWorkload(KVSTASH_SOURCE_DIR, 2, &s->w); !st.ok()) s->error = st.ToString();
    return s;
  }();
  return *setup;
}

void BM_SpecDecode(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const SpecBenchWorkload& w = s.w;
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    for (size_t c = 0; c < w.payloads.size(); ++c) {
      auto chunk = DecodeSpecPayload(*w.artifact, w.artifact_digest, w.payloads[c], w.Prediction(c),
                                     SpecBenchWorkload::kFingerprint, threads);
      if (!chunk.ok()) return state.SkipWithError(chunk.status().ToString().c_str());
      benchmark::DoNotOptimize(chunk->data.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.raw_bytes));
}

void BM_SpecContexts(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const SpecBenchWorkload& w = s.w;
  const uint64_t n = w.scalars_per_stream;
  std::vector<uint16_t> pred(n), table(n);
  for (auto _ : state) {
    for (const SpecBenchWorkload::Stream& x : w.streams) {
      if (Status st = ComputeContexts(w.artifact->contexts, std::span(x.mu, n), x.log2_sigma, 1.0f, pred, table);
          !st.ok()) {
        return state.SkipWithError(st.ToString().c_str());
      }
      benchmark::DoNotOptimize(table.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.raw_bytes));
}

void BM_SpecRans(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const SpecBenchWorkload& w = s.w;
  std::vector<uint16_t> symbols(w.scalars_per_stream);
  for (auto _ : state) {
    for (const SpecBenchWorkload::Stream& x : w.streams) {
      if (Status st = entropy::RansDecodeSegmented(x.bytes, x.table, *w.artifact->tables, symbols); !st.ok()) {
        return state.SkipWithError(st.ToString().c_str());
      }
      benchmark::DoNotOptimize(symbols.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.raw_bytes));
}

BENCHMARK(BM_SpecDecode)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpecContexts)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpecRans)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvstash::spec
