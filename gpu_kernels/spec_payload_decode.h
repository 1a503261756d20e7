// CUDA decoder of whole spec payloads (codec/spec/spec_codec.h, docs/format/spec.md):
// the payload's header and body are checked and split on the host by the CPU codec's
// own parser (spec::SplitSpecPayload: codec, model fingerprint, artifact digest, the
// prediction digest against the caller's prediction); every (layer, K/V) stream is
// then decoded on the GPU by DecodeSpecTensorDevice (gpu_kernels/spec_decode.h) into
// one device buffer in the canonical chunk layout (kvstash/kv_chunk.h), which is copied
// back and verified against the payload's content checksum before anything is
// returned. Byte for byte what spec::DecodeSpecPayload returns, or the same error.
//
// The predictor's K/V is host memory (spec::PredictedChunk: what SpecPredictor and
// SpecPredictorCuda leave in a PredictorCache) and is uploaded per call.
//
// Host API only (no device syntax). Create uploads the artifact's rANS tables once
// (DeviceRansTables) and synchronises `stream`. Decode allocates its device workspace
// per call (freed on return; the caller's `device_out`, if any, excepted), enqueues on
// `stream` and synchronises it before returning.
//
// Errors: Create: InvalidArgument for an artifact without tables; CUDA errors as
//   gpu::CudaStatus (Internal; Unavailable without a device). Decode: Mismatch for
//   another codec's payload, another artifact or model, or a prediction whose digest
//   differs from the encoder's; Corruption for a malformed body, a damaged rANS stream
//   (the lowest failing stream's segment status) or a content checksum mismatch;
//   InvalidArgument for a prediction of the wrong shape or a `device_out` of the wrong
//   size or (bf16/f16) an odd address.
// Thread-safety: immutable after Create; Decode may run concurrently (each call owns
//   its workspace), on the device Create was called on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>

#include "codec/spec/spec_artifact.h"
#include "codec/spec/spec_codec.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::gpu {

class DeviceSpecDecoder {
 public:
  // Uploads the artifact's tables; synchronises `stream`.
  static Result<DeviceSpecDecoder> Create(spec::SpecArtifact artifact, cudaStream_t stream);
  DeviceSpecDecoder(DeviceSpecDecoder&& other) noexcept;
  DeviceSpecDecoder& operator=(DeviceSpecDecoder&& other) noexcept;
  DeviceSpecDecoder(const DeviceSpecDecoder&) = delete;
  DeviceSpecDecoder& operator=(const DeviceSpecDecoder&) = delete;
  ~DeviceSpecDecoder();

  // The artifact payloads must have been encoded with (its Digest() is checked).
  const spec::SpecArtifact& artifact() const;

  // Decodes `payload` against the predictor's K/V of the same tokens. Returns the
  // verified chunk on the host. When `device_out` is not null it must point to
  // layout.DataBytes(tokens) bytes of device memory (header layout and tokens, see
  // PayloadView): the decoded data bytes are left there too, in KvChunk::data order,
  // and they are the bytes the content checksum verified (on any error its contents
  // are unspecified and must not be used).
  Result<KvChunk> Decode(std::span<const uint8_t> payload, const spec::PredictedChunk& prediction,
                         const Digest256& model_fingerprint, cudaStream_t stream,
                         uint8_t* device_out = nullptr, uint64_t device_out_bytes = 0) const;

 private:
  struct Impl;
  explicit DeviceSpecDecoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::gpu
