// Google Benchmark micro-benchmarks of the rANS coder: encode and decode (scalar and
// AVX2) of 1 Mi symbols drawn from a Laplace(0, 4) 8-bit residual pmf, per precision,
// single table and 4 tables selected per symbol. Throughput is reported as bytes of
// symbols (1 per 8-bit symbol). Each benchmark checks its round trip once.
// The end-to-end table with baselines is `kvstash-bench entropy`.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "codec/entropy/pmf.h"
#include "codec/entropy/rans.h"
#include "codec/entropy/table_builder.h"

namespace kvstash::entropy {
namespace {

constexpr size_t kSymbols = 1 << 20;

struct Fixture {
  TableSet tables;
  std::vector<uint8_t> symbols;
  std::vector<uint16_t> idx;
  std::vector<uint8_t> stream;
};

Fixture Make(int precision, int num_tables) {
  std::vector<FrequencyTable> tables;
  std::vector<std::vector<double>> pmfs;
  for (int t = 0; t < num_tables; ++t) {
    pmfs.push_back(LaplacePmf(8, SymbolMapping::kTwosComplement, 0.0, 4.0 + 2.0 * t).value());
    tables.push_back(BuildTable(pmfs.back(), {.precision = precision}).value());
  }
  Fixture f{TableSet::Create(std::move(tables)).value(), {}, {}, {}};
  std::mt19937_64 rng(1);
  std::vector<std::vector<double>> cdfs;
  for (const auto& pmf : pmfs) {
    std::vector<double> cdf(pmf.size());
    double acc = 0;
    for (size_t v = 0; v < pmf.size(); ++v) cdf[v] = acc = acc + pmf[v];
    cdfs.push_back(cdf);
  }
  f.symbols.resize(kSymbols);
  if (num_tables > 1) f.idx.resize(kSymbols);
  for (size_t i = 0; i < kSymbols; ++i) {
    const int t = num_tables > 1 ? static_cast<int>(rng() % num_tables) : 0;
    if (num_tables > 1) f.idx[i] = static_cast<uint16_t>(t);
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53 * cdfs[t].back();
    f.symbols[i] = static_cast<uint8_t>(
        std::min<size_t>(255, std::upper_bound(cdfs[t].begin(), cdfs[t].end(), u) - cdfs[t].begin()));
  }
  f.stream = RansEncode(f.symbols, f.idx, f.tables).value();
  return f;
}

void BM_Encode(benchmark::State& state) {
  const Fixture f = Make(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::vector<uint8_t> out;
  for (auto _ : state) {
    out.clear();
    if (!RansEncodeAppend(f.symbols, f.idx, f.tables, &out).ok()) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kSymbols);
  state.counters["bits_per_symbol"] = 8.0 * f.stream.size() / kSymbols;
}

void BM_Decode(benchmark::State& state, RansDecoder decoder) {
  if (!RansDecoderAvailable(decoder)) {
    state.SkipWithError("decoder not available on this CPU");
    return;
  }
  const Fixture f = Make(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::vector<uint8_t> out(kSymbols);
  if (!RansDecode(f.stream, f.idx, f.tables, out, decoder).ok() || out != f.symbols) {
    state.SkipWithError("round trip failed");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(RansDecode(f.stream, f.idx, f.tables, out, decoder).ok());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kSymbols);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int p : {10, 11, 12, 15}) {
    for (int t : {1, 4}) b->Args({p, t});
  }
  b->ArgNames({"P", "tables"})->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Encode)->Apply(Args);
BENCHMARK_CAPTURE(BM_Decode, scalar, RansDecoder::kScalar)->Apply(Args);
BENCHMARK_CAPTURE(BM_Decode, avx2, RansDecoder::kAvx2)->Apply(Args);

}  // namespace
}  // namespace kvstash::entropy
