// Element-wise and row-wise steps of the forward pass (everything but the matrix
// products, which are model/forward/linear.h and model/forward/attention.h).
//
// Each follows the Hugging Face transformers definition of the same step, in fp32
// with sums accumulated in double (so our result is the exactly rounded value and
// differs from torch's fp32 reductions by their rounding only):
//   RmsNorm:  y = w * (x / sqrt(mean(x^2) + eps))            (LlamaRMSNorm)
//   Rope:     rotate_half layout, inv_freq_i = theta^(-2i/d), angle = pos * inv_freq_i
//             x'_i = x_i cos - x_{i+d/2} sin, x'_{i+d/2} = x_{i+d/2} cos + x_i sin
//   SiluMul:  gate * sigmoid(gate) * up                      (LlamaMLP act)
//
// Thread-safety: pure functions over caller buffers.
#pragma once

#include <cstdint>
#include <vector>

namespace kvstash::model {

// x [rows, n] row-major, normalised in place with weight w [n].
void RmsNorm(float* x, uint32_t rows, uint32_t n, const float* w, float eps);

// cos/sin tables for positions [first, first + count) of a head_dim-wide rotary
// embedding: each [count, head_dim/2].
struct RopeTable {
  uint32_t first = 0, count = 0, half = 0;
  std::vector<float> cos, sin;
  static RopeTable Build(uint32_t first, uint32_t count, uint32_t head_dim, float theta);
};

// Rotates x [count, n_heads, head_dim] (positions table.first + row) in place.
void ApplyRope(float* x, uint32_t n_heads, uint32_t head_dim, const RopeTable& table);

// x [rows, n] row-major: x[r, i] += b[i] (a projection's bias, as nn.Linear adds it).
void AddBias(float* x, uint32_t rows, uint32_t n, const float* b);

// gate[i] = silu(gate[i]) * up[i] for n values.
void SiluMul(float* gate, const float* up, uint64_t n);

}  // namespace kvstash::model
