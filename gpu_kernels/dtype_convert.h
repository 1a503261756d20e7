// Device-side dtype conversions between fp32 and bf16 / fp8 e4m3 (scaled), bit-identical
// to the CPU reference in kvstash/dtype.h (both compile kvstash/dtype_bits.h; the GPU
// test compares every bf16 and fp8 bit pattern).
//
// All pointers are device memory owned by the caller; n is the element count. Work is
// enqueued on `stream`; no allocation, no host synchronisation. Errors: InvalidArgument
// for a non-finite or non-positive fp8 scale; otherwise the launch error, if any.
// Thread-safety: safe to call concurrently on different streams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kvstash/status.h"

namespace kvstash::gpu {

Status Bf16ToF32Device(const uint16_t* in, float* out, size_t n, cudaStream_t stream);
Status F32ToBf16Device(const float* in, uint16_t* out, size_t n, cudaStream_t stream);
// out[i] = float(e4m3 in[i]) * scale.
Status Fp8E4M3ToF32Device(const uint8_t* in, float scale, float* out, size_t n,
                          cudaStream_t stream);
// out[i] = e4m3(in[i] / scale), saturating, round to nearest even.
Status F32ToFp8E4M3Device(const float* in, float scale, uint8_t* out, size_t n,
                          cudaStream_t stream);

}  // namespace kvstash::gpu
