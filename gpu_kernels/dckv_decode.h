// CUDA decoder of dckv payloads (codec/dckv/dckv_codec.h, docs/format/dckv.md "GPU
// decoder"): the payload's header and body are checked and split on the host by the
// CPU codec's own parser (DckvCodec::SplitPayload); the rANS symbols are decoded on
// the GPU (gpu_kernels/rans_decode.h), then, all on the GPU:
//   pass 1, even coded rows: mu = token map applied to the row's token embedding z,
//   pass 2, odd coded rows: mu = checkerboard context map applied to [n | z], n the
//     mean of the decoded even neighbours' first k coefficients (token map when the
//     group has no context map), c_i = mu_i + s_i * step_i (dckv_conditional.h),
//   per group with a decoder correction net, its hidden layer Gelu(W1 c + b1) per coded
//     row (codec/dckv/dckv_correction.h steps 1-2),
//   synthesis x = mean + sum_i c_i basis_i (+ the net's output layer W2 h + b2, step 3-4)
//     per group, RoPE re-applied to K with the
//     cos/sin table computed on the host by dckv::RopeTable and uploaded, bf16 rounding
//     into the canonical chunk layout;
// the raw head/tail rows are copied in on the host, and the decoded chunk's content
// checksum is verified against the payload header like the CPU decoder does.
//
// Bit-identical to DckvCodec::Decode. Every output value is computed by one thread in
// the CPU contract's order, by the per-value functions of
// codec/dckv/dckv_decode_element.h, which the host runs too (tested against the CPU
// decoder in CI without a GPU): dckv_conditional.h PredictRows (bias first, inputs
// ascending, zero inputs skipped), dckv_synthesis.h (mean first, components ascending,
// zero coefficients skipped), the correction net's layers in the same order and its GELU
// (codec/dckv/dckv_gelu.h, IEEE division), dckv_rope.h RotatePair, each multiply and add an explicit
// correctly rounded __fmul_rn / __fadd_rn / __fsub_rn / __fdiv_rn (never fused; the library is
// also built with --fmad=false). The matrix products are therefore NOT done
// with cuBLAS: its summation order (split-K, tensor-core accumulation, FMA) is
// unspecified and differs between versions and GPUs, so its results would not match
// the payload's content checksum, and a decoder that cannot verify the checksum could
// not tell a damaged payload from a rounding difference. The tolerance against the CPU
// reference is zero bits; tests/gpu_kernels/dckv_decode_gpu_test.cc compares bytes.
//
// Host API only (no device syntax). Create uploads the artifact once (tables via
// DeviceRansTables, per group mean, decoder basis, steps, token map, context map, decoder
// correction net, the symbols' table indices, the bf16 token embeddings). Decode allocates its own device
// workspace per call (one cudaMalloc, freed on return), enqueues on `stream` and
// synchronises it before returning.
//
// Errors: Create: InvalidArgument for an artifact DckvCodec::Create refuses; CUDA
//   errors as gpu::CudaStatus (Internal; ResourceExhausted when out of device memory,
//   Unavailable without a device). Decode: Mismatch for another codec's payload,
//   another artifact or model fingerprint; Corruption for a malformed header, body or
//   rANS stream and for a content checksum mismatch; CUDA errors as in Create.
// Thread-safety: a DeviceDckvDecoder is immutable after Create; Decode may run
//   concurrently (each call owns its workspace), on the device Create was called on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>

#include "codec/dckv/dckv_codec.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::gpu {

class DeviceDckvDecoder {
 public:
  // Validates the artifact (DckvCodec::Create) and uploads it; synchronises `stream`.
  static Result<DeviceDckvDecoder> Create(dckv::DckvArtifact artifact, cudaStream_t stream);
  DeviceDckvDecoder(DeviceDckvDecoder&& other) noexcept;
  DeviceDckvDecoder& operator=(DeviceDckvDecoder&& other) noexcept;
  DeviceDckvDecoder(const DeviceDckvDecoder&) = delete;
  DeviceDckvDecoder& operator=(const DeviceDckvDecoder&) = delete;
  ~DeviceDckvDecoder();

  // The host codec of the same artifact (parser, digest, output layout).
  const dckv::DckvCodec& codec() const;

  // Decodes a dckv payload to the canonical bf16 chunk (codec().OutputLayout()),
  // byte for byte what DckvCodec::Decode returns. Errors: see above; NotSupported for
  // an f16 payload (f16 output decodes on the CPU only, DckvCodec::Decode).
  //
  // When `device_out` is not null it must point to device memory of exactly
  // OutputLayout().DataBytes(tokens) bytes (tokens: the payload header's;
  // InvalidArgument otherwise, checked before decoding): the decoded chunk's data bytes
  // are left there too, in KvChunk::data order. They are written only AFTER the content
  // checksum has verified them (copied from the verified host chunk, one host-to-device
  // copy on `stream`, synchronised), so on any error device_out is untouched.
  Result<KvChunk> Decode(std::span<const uint8_t> payload, const Digest256& model_fingerprint,
                         cudaStream_t stream, uint8_t* device_out = nullptr,
                         uint64_t device_out_bytes = 0) const;

 private:
  struct Model;  // device copy of the artifact (dckv_decode.cu)
  explicit DeviceDckvDecoder(std::unique_ptr<Model> model);
  std::unique_ptr<Model> model_;
};

}  // namespace kvstash::gpu
