// The spec codec: lossless coding of a KV chunk against a deterministic predictor's
// KV (speculative KV coding, docs/methods.md §1; our model: docs/format/spec.md).
//
// READ ME FIRST
// - Both sides run the same SpecPredictor over the prefix and pass its K/V for the
//   chunk's tokens here. The body stores an XXH3-64 of that prediction: a decoder
//   whose predictor disagrees in any bit returns Mismatch instead of garbage.
// - Every scalar is coded as a residual in the ordinal domain of the stored dtype
//   (codec/spec/ordinal.h) with a rANS table chosen by codec/spec/spec_context.h, so
//   every bit pattern (NaN, Inf, -0) round-trips exactly.
// - One segmented rANS stream per (layer, K/V) (2 * n_layers streams): they are coded
//   independently, in parallel on `threads` CPU threads (stream s on worker s % threads;
//   the payload bytes and the decoded chunk do not depend on the thread count) or on GPU
//   warps.
//
// Body layout (after the 136-byte payload header, codec id 1):
//   u64 prediction digest, u32 n_streams (= 2 * n_layers),
//   fp8 only: f32 scales [n_layers][2],
//   u32 stream byte sizes [n_streams], streams (codec/entropy/rans_segments.h).
// Thread-safety: pure functions over immutable inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/spec/spec_artifact.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/payload_format.h"

namespace kvstash::spec {

// The predictor's K/V for one chunk: per layer pointers to [tokens, n_kv_heads,
// head_dim] fp32 (K after RoPE, as cached). Memory is the caller's.
struct PredictedChunk {
  uint32_t tokens = 0;
  std::vector<const float*> k, v;  // n_layers entries each

  // XXH3-64 over all K then V values of every layer, in layer order.
  uint64_t Digest(const KvLayout& layout) const;
};

// Tokens [b, e) of a model's per-layer K and V caches as a PredictedChunk: `cache.k[l]`
// and `cache.v[l]` are fp32 [tokens, n_kv_heads, head_dim] (model::PredictorCache,
// model::KvCache, ...). The result points into `cache`, which must outlive it.
// REQUIRES: b <= e <= the cache's tokens; layout.n_layers entries in cache.k and cache.v.
template <typename Cache>
PredictedChunk PredictedSlice(const Cache& cache, const KvLayout& layout, uint32_t b, uint32_t e) {
  PredictedChunk p;
  p.tokens = e - b;
  const size_t off = static_cast<size_t>(b) * layout.n_kv_heads * layout.head_dim;
  for (uint32_t l = 0; l < layout.n_layers; ++l) {
    p.k.push_back(cache.k[l].data() + off);
    p.v.push_back(cache.v[l].data() + off);
  }
  return p;
}

// Every function below comes in two forms. The one with `artifact_digest` takes
// artifact.Digest() from the caller, who computes it once per artifact: Digest()
// serialises and hashes the whole artifact (2.9 ms for the 1.1 MB SmolLM2 artifact, more
// than a GPU takes to decode a chunk), so per-chunk callers (PrefixCodec, the GPU
// decoder) must not pay it per payload. A digest that is not the artifact's makes the
// encoder write it into the header and the decoders answer Mismatch. The form without
// computes the digest itself (tests, one-off tools).

// Encodes a chunk into a complete payload (header + body), the streams on `threads`
// std::threads (< 1 means 1; same bytes for any count). Errors: InvalidArgument if
// the chunk, the prediction or the artifact disagree in layout/dtype.
Result<std::vector<uint8_t>> EncodeSpecPayload(const SpecArtifact& artifact, const Digest256& artifact_digest,
                                               const KvChunkView& chunk, const PredictedChunk& prediction,
                                               const Digest256& model_fingerprint, uint32_t token_offset,
                                               int threads = 1);
Result<std::vector<uint8_t>> EncodeSpecPayload(const SpecArtifact& artifact,
                                               const KvChunkView& chunk,
                                               const PredictedChunk& prediction,
                                               const Digest256& model_fingerprint,
                                               uint32_t token_offset, int threads = 1);

// A spec payload parsed and checked by SplitSpecPayload, before any stream is decoded.
// The spans point into the payload, which must outlive this.
struct SpecPayloadParts {
  PayloadHeader header;
  std::vector<float> scales;                       // [2 * n_layers], fp8 only; else empty
  std::vector<std::span<const uint8_t>> streams;   // [2 * n_layers], layer-major, K then V
};

// Parses a payload produced by EncodeSpecPayload and checks that it is one for this
// artifact, model and prediction (shape and digest). What every decoder runs first
// (DecodeSpecPayload here, gpu::DeviceSpecDecoder). Errors: as DecodeSpecPayload,
// except the stream and content-checksum ones, which only decoding finds.
Result<SpecPayloadParts> SplitSpecPayload(const SpecArtifact& artifact, const Digest256& artifact_digest,
                                          std::span<const uint8_t> payload, const PredictedChunk& prediction,
                                          const Digest256& model_fingerprint);
Result<SpecPayloadParts> SplitSpecPayload(const SpecArtifact& artifact, std::span<const uint8_t> payload,
                                          const PredictedChunk& prediction,
                                          const Digest256& model_fingerprint);

// Decodes a payload produced by EncodeSpecPayload. Errors: Corruption for a malformed
// or damaged payload or a content checksum mismatch after decoding; Mismatch for a
// payload of another codec, artifact, model, or a prediction that differs from the
// encoder's; InvalidArgument for a prediction of the wrong shape. The streams are decoded
// on `threads` std::threads (< 1 means 1); output and the error returned (the one of the
// lowest failing stream) do not depend on the count.
Result<KvChunk> DecodeSpecPayload(const SpecArtifact& artifact, const Digest256& artifact_digest,
                                  std::span<const uint8_t> payload, const PredictedChunk& prediction,
                                  const Digest256& model_fingerprint, int threads = 1);
Result<KvChunk> DecodeSpecPayload(const SpecArtifact& artifact, std::span<const uint8_t> payload,
                                  const PredictedChunk& prediction,
                                  const Digest256& model_fingerprint, int threads = 1);

}  // namespace kvstash::spec
