// The workload of the spec decode benchmarks (spec_decode_bench.cc on the CPU,
// spec_decode_gpu_bench.cc against CUDA), built once per process: SmolLM2-135M
// prefills the first 1,536-token evaluation document (model/corpus/text_corpus.h); its
// KV is cut into 256-token bf16 chunks; the default spec predictor (W8A16-g128) runs
// over the same tokens; each chunk is spec-coded with the artifact of the determinism
// manifest (tests/determinism/fixtures/spec.kvsa, calibrated on the calibration split).
// For the benchmarks of the decode's steps it also keeps every rANS stream with its
// prediction and the table index of each scalar (spec::ComputeContexts).
// Thread-safety: built by one thread, then read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/spec/spec_codec.h"
#include "kvstash/status.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::spec {

struct SpecBenchWorkload {
  static constexpr uint32_t kPrefixTokens = 1536;
  static constexpr uint32_t kChunkTokens = 256;
  static constexpr Digest256 kFingerprint = {9};  // the model fingerprint the payloads carry

  // One rANS stream (one tensor, K or V, of one layer of one chunk).
  struct Stream {
    std::span<const uint8_t> bytes;     // the segmented stream, inside payloads
    const float* mu = nullptr;          // its prediction, [scalars_per_stream] fp32, inside prediction
    std::span<const float> log2_sigma;  // the artifact's per-channel spread
    std::vector<uint16_t> table;        // [scalars_per_stream] the frequency table of each scalar
  };

  std::unique_ptr<SpecArtifact> artifact;
  Digest256 artifact_digest{};  // artifact->Digest(), once (as PrefixCodec holds it)
  model::PredictorCache prediction;
  KvLayout layout;  // SmolLM2's, bf16
  std::vector<std::vector<uint8_t>> payloads;  // one per chunk, in token order
  uint64_t raw_bytes = 0;                      // bf16 KV bytes of all chunks
  uint64_t scalars_per_stream = 0;
  std::vector<Stream> streams;  // chunk-major, then layer, then K before V

  // The predictor's slice for chunk `c` (tokens [c * 256, (c + 1) * 256)).
  PredictedChunk Prediction(size_t c) const;
};

// Builds the workload with `threads` threads for the predictor and the encoder.
// Errors: NotFound when models/SmolLM2-135M-Instruct.Q4_1.gguf (under source_dir) is
// absent or the evaluation corpus is shorter than the prefix; the loaders', the
// prefill's and the codec's errors otherwise.
Status BuildSpecBenchWorkload(const std::string& source_dir, int threads, SpecBenchWorkload* w);

}  // namespace kvstash::spec
