// Kernels of the CUDA dckv decoder (host API: gpu_kernels/dckv_decode.h). Element-
// parallel grid-stride loops; each output value is computed by one thread with the CPU
// contract's operation order and explicit round-to-nearest intrinsics (never fused),
// so the results are bit-identical to codec/dckv (see dckv_decode.h).
#pragma once

#include <cstdint>

#include "common/dtype_bits.h"

namespace kvstash::gpu::kernels {

// Symbol s = r * active + i of a chunk uses table even[i] on even coded rows r and
// odd[i] on odd ones (DckvCodec's SymbolTables).
__global__ void DckvTableIndexKernel(const uint16_t* __restrict__ even, const uint16_t* __restrict__ odd,
                                     uint64_t active, uint64_t n, uint16_t* __restrict__ index) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t s = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < n; s += stride) {
    const uint64_t r = s / active, i = s % active;
    index[s] = (r % 2 == 0 ? even : odd)[i];
  }
}

// One pass (one parity) of one group: the coefficients of coded rows parity, parity + 2,
// ... (dckv_conditional.h). Thread (b, i): row r = parity + 2b, component i.
struct DckvPassParams {
  const float* map = nullptr;        // [k + rank + 1, n_active], last row the bias
  uint32_t k = 0;                    // neighbour inputs (0: the token map)
  uint32_t rank = 0;                 // token embedding inputs
  uint32_t n_active = 0;
  uint32_t parity = 0;
  uint32_t rows = 0;                 // coded rows of the chunk
  uint64_t stride = 0;               // active components of all groups (symbols per row)
  uint64_t offset = 0;               // the group's first component in a row
  const float* step = nullptr;       // [n_active]
  const uint16_t* embed = nullptr;   // [vocab, rank] bf16
  const uint32_t* token_ids = nullptr;  // [rows], or null: z = 0
  const uint16_t* symbols = nullptr; // [rows, stride] two's complement
  float* coef = nullptr;             // [rows, stride]
};

// mu += v * m (product rounded, then the sum), skipped when v is 0 (PredictRows).
__device__ __forceinline__ float DckvAccumulate(float mu, float v, float m) {
  return v != 0.0f ? __fadd_rn(mu, __fmul_rn(v, m)) : mu;
}

__global__ void DckvPassKernel(DckvPassParams p) {
  const uint64_t count = (p.rows - p.parity + 1) / 2;
  const uint64_t n = count * p.n_active;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    const uint32_t i = static_cast<uint32_t>(t % p.n_active);
    const uint64_t r = p.parity + 2 * (t / p.n_active);
    const uint32_t na = p.n_active;
    float mu = p.map[static_cast<uint64_t>(p.k + p.rank) * na + i];
    if (p.k > 0) {
      const float* prev = p.coef + (r - 1) * p.stride + p.offset;
      const float* next = r + 1 < p.rows ? prev + 2 * p.stride : nullptr;
      for (uint32_t j = 0; j < p.k; ++j) {
        const float v = next == nullptr ? prev[j] : __fmul_rn(0.5f, __fadd_rn(prev[j], next[j]));
        mu = DckvAccumulate(mu, v, p.map[static_cast<uint64_t>(j) * na + i]);
      }
    }
    if (p.token_ids != nullptr) {
      const uint16_t* z = p.embed + static_cast<uint64_t>(p.token_ids[r]) * p.rank;
      for (uint32_t j = 0; j < p.rank; ++j) {
        mu = DckvAccumulate(mu, Bf16ToF32(z[j]), p.map[static_cast<uint64_t>(p.k + j) * na + i]);
      }
    }
    const uint64_t at = r * p.stride + p.offset + i;
    const float s = static_cast<float>(static_cast<int16_t>(p.symbols[at]));
    p.coef[at] = __fadd_rn(mu, __fmul_rn(s, p.step[i]));
  }
}

// Synthesis, RoPE and bf16 rounding of one group's coded rows. Thread (r, pair): the
// two values (column a, a + head_dim / 2) of one head half-pair of layer j's K or V.
struct DckvSynthesisParams {
  const float* mean = nullptr;   // [dims]
  const float* basis = nullptr;  // [n_active, dims]
  uint32_t n_active = 0, dims = 0;
  uint32_t first_layer = 0;
  uint32_t n_kv_heads = 0, head_dim = 0;
  uint32_t rows = 0;             // coded rows
  uint32_t first_row = 0;        // the chunk row of coded row 0 (raw head rows)
  uint32_t tokens = 0;           // rows of the chunk
  uint64_t stride = 0, offset = 0;  // coefficient row stride and the group's offset
  const float* coef = nullptr;   // [rows, stride]
  const float* rope_cos = nullptr;  // [rows, head_dim / 2]
  const float* rope_sin = nullptr;
  uint16_t* out = nullptr;       // canonical chunk, bf16
};

__global__ void DckvSynthesisKernel(DckvSynthesisParams p) {
  const uint32_t half = p.head_dim / 2;
  const uint32_t head_row = p.n_kv_heads * p.head_dim;
  const uint32_t pairs = p.dims / 2;
  const uint64_t n = static_cast<uint64_t>(p.rows) * pairs;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    const uint64_t r = t / pairs;
    const uint32_t q = static_cast<uint32_t>(t % pairs);
    const uint32_t i = q % half;
    const uint32_t h = (q / half) % p.n_kv_heads;
    const uint32_t block = q / (half * p.n_kv_heads);  // layer_in_group * 2 + kv
    const uint32_t a = block * head_row + h * p.head_dim + i, b = a + half;
    float xa = p.mean[a], xb = p.mean[b];
    const float* c = p.coef + r * p.stride + p.offset;
    for (uint32_t k = 0; k < p.n_active; ++k) {
      const float ck = c[k];
      if (ck != 0.0f) {
        const float* w = p.basis + static_cast<uint64_t>(k) * p.dims;
        xa = __fadd_rn(xa, __fmul_rn(ck, w[a]));
        xb = __fadd_rn(xb, __fmul_rn(ck, w[b]));
      }
    }
    const uint32_t kv = block % 2;
    if (kv == 0) {  // RotatePair of dckv_rope.cc, forward
      const float cs = p.rope_cos[r * half + i], sn = p.rope_sin[r * half + i];
      const float ra = __fsub_rn(__fmul_rn(xa, cs), __fmul_rn(xb, sn));
      const float rb = __fadd_rn(__fmul_rn(xb, cs), __fmul_rn(xa, sn));
      xa = ra;
      xb = rb;
    }
    const uint64_t layer = p.first_layer + block / 2;
    const uint64_t base = ((2 * layer + kv) * p.tokens + p.first_row + r) * head_row + h * p.head_dim + i;
    p.out[base] = F32ToBf16(xa);
    p.out[base + half] = F32ToBf16(xb);
  }
}

}  // namespace kvstash::gpu::kernels
