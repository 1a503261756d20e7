// CUDA versions of the spec predictor's deterministic steps (model/predictor/spec_predictor.h),
// bit-identical to the CPU predictor: W8A16 activation quantiser, int16 x int8 grouped
// GEMM, RMSNorm, RoPE, causal attention, residual add and SwiGLU. tests/gpu_kernels/
// spec_predictor_gpu_test.cc compares each with the CPU function on random inputs.
//
// READ ME FIRST
// - Determinism, not speed: every output element is computed by one thread in exactly
//   the CPU's operation order. Quantiser, RMSNorm, RoPE and attention run the shared
//   per-row functions of numerics/quantize_group.h and numerics/spec_predictor_ops.h;
//   the GEMM sums each group's int16 x int8 products exactly in int32 (|sum| <=
//   512 * 32767 * 128 < 2^31) and accumulates float(dot_g) * (sa * sb) over groups in
//   increasing g, as numerics/int8_gemm.cc. The kernels are simple one-thread-per-
//   row/element loops; a tiled GEMM and a fused attention are later work.
// - NaN: a NaN input or intermediate gives NaN on both sides, but CUDA arithmetic
//   returns a canonical NaN where the CPU propagates the operand's sign and payload,
//   so NaN bits may differ (the spec prediction digest then differs and the decoder
//   reports Mismatch, never wrong KV). Bit identity holds for finite data, which is
//   what the tests use; the quantiser never does arithmetic on a NaN (NaN -> 0).
// - model/predictor/spec_predictor_cuda.h sequences them into a whole SpecPredictor::Run.
//
// Host API only (no device syntax). All pointers are caller-owned device memory; work
// is enqueued on `stream`; nothing is allocated or synchronised. Errors:
// InvalidArgument for bad shapes (as the CPU functions); Internal for a failed launch.
// Thread-safety: reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kvstash/status.h"

namespace kvstash::gpu {

// As spec::QuantizeRowsInt16: x [rows, cols] fp32 -> q [rows, cols] int16 and
// scales [rows, groups], groups = ceil(cols / group). REQUIRES rows, cols >= 0,
// group >= 1.
Status QuantizeRowsInt16Device(const float* x, int rows, int cols, int group, int16_t* q,
                               float* scales, cudaStream_t stream);

// As spec::Int16x8GemmGroupedNT: out [m, n] = sum over groups g (ascending) of
// float(dot_g(a[i], b[j])) * (a_scale[i * groups + g] * b_scale[j * groups + g]);
// a int16 [m, k], b int8 [n, k] (row per output channel). REQUIRES m, n >= 0,
// 0 <= k <= 2^17, 1 <= group <= spec::kMaxInt16Group.
Status Int16x8GemmGroupedDevice(const int16_t* a, const float* a_scale, const int8_t* b,
                                const float* b_scale, float* out, int m, int n, int k, int group,
                                cudaStream_t stream);

// In place RMSNorm of x [rows, n] with weights w [n] (model::RmsNormRow per row).
Status RmsNormRowsDevice(float* x, uint32_t rows, uint32_t n, const float* w, float eps,
                         cudaStream_t stream);

// In place RoPE of x [tokens, heads, head_dim] with cos/sin [tokens, head_dim / 2]
// (model::DeterministicRope tables; model::RopeRow per head). REQUIRES head_dim even.
Status RopeDevice(float* x, uint32_t tokens, uint32_t heads, uint32_t head_dim, const float* cos,
                  const float* sin, cudaStream_t stream);

// Causal attention of rows new queries at positions first..first+rows-1:
// q [rows, n_heads, head_dim]; k, v the cache [first + rows, n_kv_heads, head_dim];
// out [rows, n_heads, head_dim]; scratch [rows * n_heads * (first + rows)] floats.
// Query head h reads kv head h / (n_heads / n_kv_heads) (model::AttentionRow with
// scale DetRsqrt(head_dim)). REQUIRES n_kv_heads >= 1 dividing n_heads, head_dim >= 1.
Status CausalAttentionDevice(const float* q, const float* k, const float* v, uint32_t first,
                             uint32_t rows, uint32_t n_heads, uint32_t n_kv_heads,
                             uint32_t head_dim, float* scratch, float* out, cudaStream_t stream);

// Residual add x[i] = x[i] + y[i] (one correctly rounded fp32 add), i < n.
Status AddInPlaceDevice(float* x, const float* y, uint64_t n, cudaStream_t stream);

// Bias add rows[t * n + i] = rows[t * n + i] + bias[i] (one correctly rounded fp32 add,
// spec::DAdd, as the CPU predictor's q/k/v bias step) for t < rows, i < n.
Status AddBiasRowsDevice(float* rows, uint64_t n_rows, uint32_t n, const float* bias, cudaStream_t stream);

// SwiGLU gate[i] = DetSilu(gate[i]) * up[i] (det_math.h), i < n.
Status SiluMulDevice(float* gate, const float* up, uint64_t n, cudaStream_t stream);

}  // namespace kvstash::gpu
