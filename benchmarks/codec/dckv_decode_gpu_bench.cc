// Google Benchmark of the CUDA dckv decoder (gpu_kernels/dckv_decode.h) against the CPU
// decoder in the same process, on the same real-KV payloads (dckv_bench_setup.h:
// SmolLM2-135M, a 1,536-token prefix of real text in six 256-token chunks). Each
// iteration decodes the whole prefix, payload bytes on the host to a verified bf16
// chunk on the host (host parsing, uploads, kernels, copy back and the checksum
// included). CPU: DckvCodec::Decode with the argument's threads. Throughput is bytes of
// bf16 KV (SetBytesProcessed). Before timing, every GPU decode is checked to equal the
// CPU's bytes. Skips with a message without a CUDA device or without the model.
// Run: build/benchmarks/codec/dckv_decode_gpu_bench (scripts/gpu_check.sh runs it).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "benchmarks/codec/dckv_bench_setup.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/dckv_decode.h"

namespace kvstash::dckv {
namespace {

using bench::Get;
using bench::kFingerprint;
using bench::Setup;

// The GPU decoder of the set-up's artifact, checked once against the CPU decoder;
// error non-empty when unavailable or different.
struct GpuSetup {
  std::string error;
  std::unique_ptr<gpu::DeviceDckvDecoder> decoder;
};

const GpuSetup& GetGpu() {
  static const GpuSetup* g = [] {
    auto* out = new GpuSetup;
    const Setup& s = Get();
    std::string why;
    if (!s.error.empty()) {
      out->error = s.error;
    } else if (!gpu::CudaDeviceAvailable(&why)) {
      out->error = "no CUDA device: " + why;
    } else if (auto d = gpu::DeviceDckvDecoder::Create(s.codec->artifact(), nullptr); !d.ok()) {
      out->error = d.status().ToString();
    } else {
      out->decoder = std::make_unique<gpu::DeviceDckvDecoder>(std::move(d).value());
      for (const auto& p : s.payloads) {
        auto cpu = s.codec->Decode(p, kFingerprint);
        auto dev = out->decoder->Decode(p, kFingerprint, nullptr);
        if (!cpu.ok() || !dev.ok() || cpu->data != dev->data) {
          out->error = "GPU decode differs from the CPU's: " + dev.status().ToString();
          break;
        }
      }
    }
    return out;
  }();
  return *g;
}

void BM_DckvDecodeGpu(benchmark::State& state) {
  const GpuSetup& g = GetGpu();
  if (!g.error.empty()) return state.SkipWithError(g.error.c_str());
  const Setup& s = Get();
  for (auto _ : state) {
    for (const auto& p : s.payloads) {
      auto chunk = g.decoder->Decode(p, kFingerprint, nullptr);
      if (!chunk.ok()) return state.SkipWithError(chunk.status().ToString().c_str());
      benchmark::DoNotOptimize(chunk->data.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

void BM_DckvDecodeCpu(benchmark::State& state) { bench::DecodePrefixOnCpu(state); }

BENCHMARK(BM_DckvDecodeGpu)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DckvDecodeCpu)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvstash::dckv
