// fp32 building blocks of the hybrid forward (model/hybrid/hybrid_model.h), written
// to follow transformers' Qwen3.5 operation order (modeling_qwen3_5.py, 5.24.0).
// All sums are left-to-right fp32 loops (the build disables FMA contraction), so a
// result depends only on its inputs, never on batching: the property that makes a
// continuation from a restored state bit-identical to an uninterrupted run.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace kvstash::hybrid {

// y[o] = sum_i w[o * in + i] * x[i]; w is a row-major [out, in] nn.Linear weight.
// REQUIRES: w.size() == y.size() * x.size().
void MatVec(std::span<const float> w, std::span<const float> x, std::span<float> y);

// Qwen3_5RMSNorm (zero-centred): y = x * rsqrt(mean(x^2) + eps) * (1 + w).
// REQUIRES: x, w, y of one size (y may alias x).
void RmsNormZeroCentred(std::span<const float> x, std::span<const float> w, float eps,
                        std::span<float> y);

// Qwen3_5RMSNormGated: y = (w * (x * rsqrt(mean(x^2) + eps))) * silu(gate).
// REQUIRES: all of one size (y may alias x).
void RmsNormGated(std::span<const float> x, std::span<const float> w,
                  std::span<const float> gate, float eps, std::span<float> y);

// x * rsqrt(sum(x^2) + eps), transformers' l2norm (eps 1e-6), in place.
void L2NormInPlace(std::span<float> x, float eps);

float Silu(float x);      // x * sigmoid(x)
float Sigmoid(float x);   // 1 / (1 + exp(-x))
float Softplus(float x);  // torch: x for x > 20, else log1p(exp(x))

// Default RoPE on the first `rotary_dim` channels of x (rotate_half convention:
// channel i pairs with i + rotary_dim / 2), the rest passes through:
//   x'[i]       = x[i] cos(p f_i) - x[i + r/2] sin(p f_i)
//   x'[i + r/2] = x[i + r/2] cos(p f_i) + x[i] sin(p f_i),  i < r/2
// with the fp32 inverse frequencies `inv_freq` (r/2 of them) and angle
// float(position) * inv_freq[i] in fp32, as transformers computes it.
void ApplyRope(std::span<float> x, uint32_t position, std::span<const float> inv_freq);

}  // namespace kvstash::hybrid
