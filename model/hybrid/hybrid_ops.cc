#include "model/hybrid/hybrid_ops.h"

#include <cmath>

namespace kvstash::hybrid {

void MatVec(std::span<const float> w, std::span<const float> x, std::span<float> y) {
  const size_t in = x.size();
  for (size_t o = 0; o < y.size(); ++o) {
    const float* row = w.data() + o * in;
    float acc = 0.0f;
    for (size_t i = 0; i < in; ++i) acc += row[i] * x[i];
    y[o] = acc;
  }
}

namespace {
float InvRms(std::span<const float> x, float eps) {
  float ss = 0.0f;
  for (float v : x) ss += v * v;
  return 1.0f / std::sqrt(ss / static_cast<float>(x.size()) + eps);
}
}  // namespace

void RmsNormZeroCentred(std::span<const float> x, std::span<const float> w, float eps,
                        std::span<float> y) {
  const float r = InvRms(x, eps);
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] * r) * (1.0f + w[i]);
}

void RmsNormGated(std::span<const float> x, std::span<const float> w,
                  std::span<const float> gate, float eps, std::span<float> y) {
  const float r = InvRms(x, eps);
  for (size_t i = 0; i < x.size(); ++i) y[i] = (w[i] * (x[i] * r)) * Silu(gate[i]);
}

void L2NormInPlace(std::span<float> x, float eps) {
  float ss = 0.0f;
  for (float v : x) ss += v * v;
  const float r = 1.0f / std::sqrt(ss + eps);
  for (float& v : x) v *= r;
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Silu(float x) { return x * Sigmoid(x); }
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void ApplyRope(std::span<float> x, uint32_t position, std::span<const float> inv_freq) {
  const size_t half = inv_freq.size();
  const float p = static_cast<float>(position);
  for (size_t i = 0; i < half; ++i) {
    const float angle = p * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

}  // namespace kvstash::hybrid
