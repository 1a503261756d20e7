// Google Benchmark of the CUDA spec decoders against the CPU decoders in the same
// process, on real KV: SmolLM2-135M prefills the first 1,536-token evaluation document
// (model/corpus/text_corpus.h) in 256-token bf16 chunks; the default spec predictor
// (W8A16-g128, on the CPU) runs over the same tokens; each chunk is spec-coded with the
// artifact of the determinism manifest (tests/determinism/fixtures/spec.kvsa, calibrated
// on SmolLM2's KV of the calibration split). Throughput is bytes of decoded bf16 KV.
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

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "codec/entropy/rans_segments.h"
#include "codec/spec/spec_codec.h"
#include "common/file_bytes.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/device_arena.h"
#include "gpu_kernels/rans_decode.h"
#include "gpu_kernels/spec_payload_decode.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/kv_cache.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::gpu {
namespace {

constexpr uint32_t kPrefixTokens = 1536;
constexpr uint32_t kChunkTokens = 256;
constexpr Digest256 kFingerprint = {9};

struct Setup {
  std::string error;         // non-empty: every benchmark skips with it
  std::string device_error;  // non-empty: the GPU benchmarks skip with it
  std::unique_ptr<spec::SpecArtifact> artifact;
  Digest256 artifact_digest{};  // artifact->Digest(), once (as PrefixCodec holds it)
  model::PredictorCache prediction;
  KvLayout layout;
  std::vector<std::vector<uint8_t>> payloads;
  std::unique_ptr<DeviceSpecDecoder> decoder;
  std::unique_ptr<DeviceRansTables> tables;  // the rANS step's copy of the artifact's tables
  uint64_t raw_bytes = 0;
  // rANS step: every stream's parts on the device (one arena) and on the host.
  struct Stream {
    std::span<const uint8_t> bytes;
    std::vector<uint16_t> table;
    entropy::SegmentDirectory dir;
    RansSegmentsLaunch launch;
  };
  std::vector<Stream> streams;
  std::unique_ptr<DeviceArena> arena;
  uint16_t* d_symbols = nullptr;
  uint64_t max_symbols = 0;
};

spec::PredictedChunk Slice(const Setup& s, uint32_t b) {
  return spec::PredictedSlice(s.prediction, s.layout, b, b + kChunkTokens);
}

Status BuildHost(Setup* s) {
  const std::string src = KVSTASH_SOURCE_DIR;
  const std::string model_path = src + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model_path)) return Status::NotFound(model_path + " absent: run scripts/setup.sh");
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(model_path));
  KVSTASH_ASSIGN_OR_RETURN(auto art_bytes, ReadFileBytes(src + "/tests/determinism/fixtures/spec.kvsa"));
  KVSTASH_ASSIGN_OR_RETURN(spec::SpecArtifact art, spec::SpecArtifact::Parse(art_bytes));
  s->artifact = std::make_unique<spec::SpecArtifact>(std::move(art));
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
  po.threads = 8;
  KVSTASH_ASSIGN_OR_RETURN(auto predictor, model::SpecPredictor::Create(*m, po));
  KVSTASH_RETURN_IF_ERROR(predictor->Run(tokens, &s->prediction));
  for (uint32_t b = 0; b < kPrefixTokens; b += kChunkTokens) {
    KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, model::ToKvChunk(cache, b, b + kChunkTokens, DType::kBF16));
    s->raw_bytes += chunk.data.size();
    KVSTASH_ASSIGN_OR_RETURN(auto payload,
                             spec::EncodeSpecPayload(*s->artifact, chunk.view(), Slice(*s, b), kFingerprint, b, 8));
    s->payloads.push_back(std::move(payload));
  }
  // The rANS step's inputs: every stream with the table indices of its contexts.
  const uint64_t n = s->layout.ScalarsPerTensor(kChunkTokens);
  s->max_symbols = n;
  std::vector<uint16_t> pred(n);
  for (size_t c = 0; c < s->payloads.size(); ++c) {
    const spec::PredictedChunk p = Slice(*s, static_cast<uint32_t>(c) * kChunkTokens);
    KVSTASH_ASSIGN_OR_RETURN(spec::SpecPayloadParts parts,
                             spec::SplitSpecPayload(*s->artifact, s->payloads[c], p, kFingerprint));
    for (uint32_t st = 0; st < parts.streams.size(); ++st) {
      Setup::Stream x;
      x.bytes = parts.streams[st];
      KVSTASH_ASSIGN_OR_RETURN(x.dir, entropy::ParseSegmentDirectory(x.bytes));
      x.table.resize(n);
      const float* mu = st % 2 == 0 ? p.k[st / 2] : p.v[st / 2];
      KVSTASH_RETURN_IF_ERROR(spec::ComputeContexts(s->artifact->contexts, std::span(mu, n),
                                                    s->artifact->Log2Sigma(st / 2, st % 2), 1.0f, pred, x.table));
      s->streams.push_back(std::move(x));
    }
  }
  return Status::Ok();
}

// The GPU decoder, checked against the CPU's bytes, and the rANS streams on the device.
Status BuildDevice(Setup* s) {
  KVSTASH_ASSIGN_OR_RETURN(DeviceSpecDecoder d, DeviceSpecDecoder::Create(*s->artifact, nullptr));
  s->decoder = std::make_unique<DeviceSpecDecoder>(std::move(d));
  KVSTASH_ASSIGN_OR_RETURN(DeviceRansTables t, DeviceRansTables::Upload(*s->artifact->tables, nullptr));
  s->tables = std::make_unique<DeviceRansTables>(std::move(t));
  const uint64_t n = s->max_symbols;
  for (size_t c = 0; c < s->payloads.size(); ++c) {
    const spec::PredictedChunk p = Slice(*s, static_cast<uint32_t>(c) * kChunkTokens);
    KVSTASH_ASSIGN_OR_RETURN(KvChunk cpu, spec::DecodeSpecPayload(*s->artifact, s->payloads[c], p, kFingerprint));
    KVSTASH_ASSIGN_OR_RETURN(KvChunk dev, s->decoder->Decode(s->payloads[c], p, kFingerprint, nullptr));
    if (dev.data != cpu.data) return Status::Internal("GPU spec decode differs from the CPU's");
  }
  uint64_t total = 0;
  std::vector<uint64_t> at_bytes, at_offsets, at_table, at_status;
  for (const Setup::Stream& x : s->streams) {
    at_bytes.push_back(DeviceArena::Reserve(&total, x.bytes.size()));
    at_offsets.push_back(DeviceArena::Reserve(&total, x.dir.offsets.size() * 8));
    at_table.push_back(DeviceArena::Reserve(&total, n * 2));
    at_status.push_back(DeviceArena::Reserve(&total, x.dir.num_segments()));
  }
  const uint64_t at_symbols = DeviceArena::Reserve(&total, n * 2);
  s->arena = std::make_unique<DeviceArena>();
  KVSTASH_RETURN_IF_ERROR(s->arena->Allocate(total, "spec bench: cudaMalloc"));
  auto up = [&](uint64_t at, const void* p, uint64_t bytes) {
    return CudaStatus(cudaMemcpy(s->arena->at<uint8_t>(at), p, bytes, cudaMemcpyHostToDevice), "upload");
  };
  for (size_t i = 0; i < s->streams.size(); ++i) {
    Setup::Stream& x = s->streams[i];
    KVSTASH_RETURN_IF_ERROR(up(at_bytes[i], x.bytes.data(), x.bytes.size()));
    KVSTASH_RETURN_IF_ERROR(up(at_offsets[i], x.dir.offsets.data(), x.dir.offsets.size() * 8));
    KVSTASH_RETURN_IF_ERROR(up(at_table[i], x.table.data(), x.table.size() * 2));
    x.launch.framed = s->arena->at<const uint8_t>(at_bytes[i]);
    x.launch.offsets = s->arena->at<const uint64_t>(at_offsets[i]);
    x.launch.num_segments = x.dir.num_segments();
    x.launch.segment_symbols = x.dir.segment_symbols;
    x.launch.num_symbols = x.dir.num_symbols;
    x.launch.table_index = s->arena->at<const uint16_t>(at_table[i]);
    x.launch.status = s->arena->at<uint8_t>(at_status[i]);
  }
  s->d_symbols = s->arena->at<uint16_t>(at_symbols);
  return Status::Ok();
}

const Setup& Get() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    std::string why;
    if (Status st = BuildHost(s); !st.ok()) {
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
    for (size_t c = 0; c < s.payloads.size(); ++c) {
      auto chunk = decode(s.payloads[c], Slice(s, static_cast<uint32_t>(c) * kChunkTokens));
      if (!chunk.ok()) return state.SkipWithError(chunk.status().ToString().c_str());
      benchmark::DoNotOptimize(chunk->data.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
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
    return spec::DecodeSpecPayload(*s.artifact, s.artifact_digest, payload, p, kFingerprint, threads);
  });
}

void BM_RansDecodeGpu(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  if (!s.device_error.empty()) return state.SkipWithError(s.device_error.c_str());
  for (auto _ : state) {
    for (const Setup::Stream& x : s.streams) {
      if (Status st = RansDecodeSegmentsCuda(s.tables->view(), x.launch, s.d_symbols, nullptr); !st.ok()) {
        return state.SkipWithError(st.ToString().c_str());
      }
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return state.SkipWithError("cudaDeviceSynchronize failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.raw_bytes));
}

void BM_RansDecodeCpu(benchmark::State& state) {
  const Setup& s = Get();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  std::vector<uint16_t> symbols(s.max_symbols);
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

BENCHMARK(BM_SpecDecodeGpu)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpecDecodeCpu)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RansDecodeGpu)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RansDecodeCpu)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvstash::gpu
