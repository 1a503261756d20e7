// CUDA decode of one spec-coded (layer, K/V) tensor (codec/spec/spec_codec.h,
// docs/format/spec.md): per scalar context (prediction ordinal + table index) from
// the predicted fp32 K/V, segmented rANS decode of the residual symbols
// (gpu_kernels/rans_decode.h), and reconstruction of the stored bf16 / fp8 bits.
// Bit-identical to the CPU decoder: the per-scalar context maths is the single
// definition in codec/spec/spec_context_scalar.h, compiled for the device with
// correctly rounded __fadd_rn/__fmul_rn/__fdiv_rn and no FMA contraction.
// tests/gpu_kernels/spec_decode_gpu_test.cc compares against the CPU codec.
//
// Host API only (no device syntax). All pointers are caller-owned device memory; work
// is enqueued on `stream`; nothing is allocated or synchronised.
//
// Errors: InvalidArgument for a bad context config, a non-finite or non-positive fp8
// scale, an empty log2_sigma row or n not a multiple of it, a stream whose symbol
// count is not n or whose segment count does not cover n, a misaligned bf16 output, or
// tables that do not match the config; Internal for a failed launch. Corrupt
// stream bytes are reported per segment in `segment_status` after the stream
// completes (RansSegmentStatusToStatus on the copied-back bytes).
// Thread-safety: reentrant; concurrent calls on different streams are fine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "codec/spec/spec_context.h"
#include "gpu_kernels/rans_decode.h"
#include "kvstash/status.h"

namespace kvstash::gpu {

// Contexts of n scalars, as spec::ComputeContexts: mu [n] fp32 predictions (a
// [T, H, D] tensor), log2_sigma [row] (row = H * D, indexed i % row), fp8_scale used
// for fp8 only. Outputs pred_ordinal [n] and table [n] (u16).
Status ComputeSpecContextsDevice(const spec::ContextConfig& cfg, const float* mu, uint64_t n,
                                 const float* log2_sigma, uint32_t row, float fp8_scale,
                                 uint16_t* pred_ordinal, uint16_t* table, cudaStream_t stream);

// One tensor's decode. The stream fields come from entropy::ParseSegmentDirectory on
// the host copy of the tensor's stream (its offsets uploaded to `offsets`).
struct SpecTensorDecodeArgs {
  const float* mu = nullptr;          // [n] predicted K or V, fp32
  uint64_t n = 0;                     // scalars = tokens * n_kv_heads * head_dim
  const float* log2_sigma = nullptr;  // [row] the artifact's Log2Sigma(layer, kv)
  uint32_t row = 0;                   // n_kv_heads * head_dim
  float fp8_scale = 1.0f;             // the payload's scale of this tensor (fp8 only)
  const uint8_t* framed = nullptr;    // the tensor's segmented rANS stream
  const uint64_t* offsets = nullptr;  // [num_segments + 1]
  uint32_t num_segments = 0;
  uint32_t segment_symbols = 0;
  uint64_t num_symbols = 0;           // from the directory; must equal n
  uint16_t* pred_ordinal = nullptr;   // workspace [n]
  uint16_t* table = nullptr;          // workspace [n]
  uint8_t* segment_status = nullptr;  // [num_segments] RansSegmentStatus
  // [n] stored values: bf16 bit patterns (n u16, 2-byte aligned; little-endian bytes
  // as in KvChunk) or fp8 bytes (n u8).
  uint8_t* out = nullptr;
};

// Decodes the tensor into args.out. `tables` is the artifact's TableSet on the device
// (DeviceRansTables::Upload(*artifact.tables)).
Status DecodeSpecTensorDevice(const spec::ContextConfig& cfg, const RansDeviceTablesView& tables,
                              const SpecTensorDecodeArgs& args, cudaStream_t stream);

}  // namespace kvstash::gpu
