// Google Benchmark of the CUDA spec decoders against the CPU decoders in the same
// process, on real KV: the workload of benchmarks/codec/spec_bench_workload.h
// (SmolLM2-135M's KV of a 1,536-token evaluation document in 256-token bf16 chunks,
// spec-coded; the predictor runs on the CPU, 8 threads, in the setup). Throughput is
// bytes of decoded bf16 KV.
//   BM_SpecDecodeGpu   gpu::DeviceSpecDecoder::Decode of the whole prefix: host
//                      parsing, uploads of payload and predictions, contexts, rANS,
//                      reconstruction, copy back and the content checksum.
//   BM_SpecDecodeCpu   spec::DecodeSpecPayload with the argument's threads.
//   BM_RansDecodeGpu   the rANS step alone: every stream of the prefix resident on the
//                      device with its table indices, one launch per stream.
//   BM_RansDecodeCpu   entropy::RansDecodeSegmented of the same streams, one thread.
// The predictor's cost is not in any of them (kvstash_determinism --cuda and
// spec_predictor_run_gpu_tests cover the CUDA predictor). Before timing, every GPU
// decode is checked to equal the CPU's bytes. Without the model everything skips with
// a message; without a CUDA device the GPU rows do (the CPU rows still run). Run: build/benchmarks/codec/spec_decode_gpu_bench
// (scripts/gpu_check.sh runs it).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "benchmarks/codec/spec_bench_workload.h"
#include "codec/entropy/rans_segments.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/device_arena.h"
#include "gpu_kernels/rans_decode.h"
#include "gpu_kernels/spec_payload_decode.h"

namespace kvstash::gpu {
namespace {

using spec::SpecBenchWorkload;
constexpr Digest256 kFingerprint = SpecBenchWorkload::kFingerprint;

struct Setup {
  std::string error;         // non-empty: every benchmark skips with it
  std::string device_error;  // non-empty: the GPU benchmarks skip with it
  SpecBenchWorkload w;
  std::unique_ptr<DeviceSpecDecoder> decoder;
  std::unique_ptr<DeviceRansTables> tables;  // the rANS step's copy of the artifact's tables
  // rANS step: the launch of every stream of w.streams, its parts in one device arena.
  std::vector<RansSegmentsLaunch> launches;
  std::unique_ptr<DeviceArena> arena;
  uint16_t* d_symbols = nullptr;
};

// The GPU decoder, checked against the CPU's bytes, and the rANS streams on the device.
Status BuildDevice(Setup* s) {
  const SpecBenchWorkload& w = s->w;
  KVSTASH_ASSIGN_OR_RETURN(DeviceSpecDecoder d, DeviceSpecDecoder::Create(*w.artifact, nullptr));
  s->decoder = std::make_unique<DeviceSpecDecoder>(std::move(d));
  KVSTASH_ASSIGN_OR_RETURN(DeviceRansTables t, DeviceRansTables::Upload(*w.artifact->tables, nullptr));
  s->tables = std::make_unique<DeviceRansTables>(std::move(t));
  const uint64_t n = w.scalars_per_stream;
  for (size_t c = 0; c < w.payloads.size(); ++c) {
    const spec::PredictedChunk p = w.Prediction(c);
    KVSTASH_ASSIGN_OR_RETURN(KvChunk cpu, spec::DecodeSpecPayload(*w.artifact, w.payloads[c], p, kFingerprint));
    KVSTASH_ASSIGN_OR_RETURN(KvChunk dev, s->decoder->Decode(w.payloads[c], p, kFingerprint, nullptr));
    if (dev.data != cpu.data) return Status::Internal("GPU spec decode differs from the CPU's");
  }
  std::vector<entropy::SegmentDirectory> dirs;
  uint64_t total = 0;
  std::vector<uint64_t> at_bytes, at_offsets, at_table, at_status;
  for (const SpecBenchWorkload::Stream& x : w.streams) {
    KVSTASH_ASSIGN_OR_RETURN(entropy::SegmentDirectory dir, entropy::ParseSegmentDirectory(x.bytes));
    at_bytes.push_back(DeviceArena::Reserve(&total, x.bytes.size()));
    at_offsets.push_back(DeviceArena::Reserve(&total, dir.offsets.size() * 8));
    at_table.push_back(DeviceArena::Reserve(&total, n * 2));
    at_status.push_back(DeviceArena::Reserve(&total, dir.num_segments()));
    dirs.push_back(std::move(dir));
  }
  const uint64_t at_symbols = DeviceArena::Reserve(&total, n * 2);
  s->arena = std::make_unique<DeviceArena>();
  KVSTASH_RETURN_IF_ERROR(s->arena->Allocate(total, "spec bench: cudaMalloc"));
  auto up = [&](uint64_t at, const void* p, uint64_t bytes) {
    return CudaStatus(cudaMemcpy(s->arena->at<uint8_t>(at), p, bytes, cudaMemcpyHostToDevice), "upload");
  };
  for (size_t i = 0; i < w.streams.size(); ++i) {
    const SpecBenchWorkload::Stream& x = w.streams[i];
    const entropy::SegmentDirectory& dir = dirs[i];
    KVSTASH_RETURN_IF_ERROR(up(at_bytes[i], x.bytes.data(), x.bytes.size()));
    KVSTASH_RETURN_IF_ERROR(up(at_offsets[i], dir.offsets.data(), dir.offsets.size() * 8));
    KVSTASH_RETURN_IF_ERROR(up(at_table[i], x.table.data(), x.table.size() * 2));
    RansSegmentsLaunch l;
    l.framed = s->arena->at<const uint8_t>(at_bytes[i]);
    l.offsets = s->arena->at<const uint64_t>(at_offsets[i]);
    l.num_segments = dir.num_segments();
    l.segment_symbols = dir.segment_symbols;
    l.num_symbols = dir.num_symbols;
    l.table_index = s->arena->at<const uint16_t>(at_table[i]);
    l.status = s->arena->at<uint8_t>(at_status[i]);
    s->launches.push_back(l);
  }
  s->d_symbols = s->arena->at<uint16_t>(at_symbols);
  return Status::Ok();
}

const Setup& Get() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    std::string why;
    if (Status st = spec::BuildSpecBenchWorkload(KVSTASH_SOURCE_DIR, 8, &s->w); !st.ok()) {
      s->error = st.ToString();
    } else if (!CudaDeviceAvailable(&why)) {
      s->device_error = "no CUDA device: " + why;
    } else if (Status d = BuildDevice(s); !d.ok()) {
      s->device_error = d.ToString();
    }
    return s;
  }();
  return *setup;
}

// Times `decode(payload, prediction)` (a Result<KvChunk>) over every chunk of the prefix;
// throughput in bf16 KV bytes.
template <typename Decode>
void DecodePrefix(benchmark::State& state, const Setup& s, Decode decode) {
  for (auto _ : state) {
    for (size_t c = 0; c < s.w.payloads.size(); ++c) {
      auto chunk = decode(s.w.payloads[c], s.w.Prediction(c));
      if (!chunk.ok()) return state.SkipWithError(chunk.status().ToString().c_str());
      benchmark::DoNotOptimize(chunk->data.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.w.raw_bytes));
}

void BM_SpecDecodeGpu(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  if (!s.device_error.empty()) return state.SkipWithError(s.device_error.c_str());
  DecodePrefix(state, s, [&](const std::vector<uint8_t>& payload, const spec::PredictedChunk& p) {
    return s.decoder->Decode(payload, p, kFingerprint, nullptr);
  });
}

void BM_SpecDecodeCpu(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const int threads = static_cast<int>(state.range(0));
  DecodePrefix(state, s, [&](const std::vector<uint8_t>& payload, const spec::PredictedChunk& p) {
    return spec::DecodeSpecPayload(*s.w.artifact, s.w.artifact_digest, payload, p, kFingerprint, threads);
  });
}

void BM_RansDecodeGpu(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  if (!s.device_error.empty()) return state.SkipWithError(s.device_error.c_str());
  for (auto _ : state) {
    for (const RansSegmentsLaunch& l : s.launches) {
      if (Status st = RansDecodeSegmentsCuda(s.tables->view(), l, s.d_symbols, nullptr); !st.ok()) {
        return state.SkipWithError(st.ToString().c_str());
      }
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return state.SkipWithError("cudaDeviceSynchronize failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.w.raw_bytes));
}

void BM_RansDecodeCpu(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  std::vector<uint16_t> symbols(s.w.scalars_per_stream);
  for (auto _ : state) {
    for (const SpecBenchWorkload::Stream& x : s.w.streams) {
      if (Status st = entropy::RansDecodeSegmented(x.bytes, x.table, *s.w.artifact->tables, symbols); !st.ok()) {
        return state.SkipWithError(st.ToString().c_str());
      }
      benchmark::DoNotOptimize(symbols.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.w.raw_bytes));
}

BENCHMARK(BM_SpecDecodeGpu)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpecDecodeCpu)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RansDecodeGpu)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RansDecodeCpu)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvstash::gpu
