#include "model/forward/ops.h"

#include <cmath>

namespace kvstash::model {

void RmsNorm(float* x, uint32_t rows, uint32_t n, const float* w, float eps) {
  for (int64_t r = 0; r < static_cast<int64_t>(rows); ++r) {
    float* row = x + r * n;
    double ss = 0;
    for (uint32_t i = 0; i < n; ++i) ss += static_cast<double>(row[i]) * row[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + static_cast<double>(eps)));
    for (uint32_t i = 0; i < n; ++i) row[i] = w[i] * (row[i] * inv);
  }
}

RopeTable RopeTable::Build(uint32_t first, uint32_t count, uint32_t head_dim, float theta) {
  RopeTable t;
  t.first = first;
  t.count = count;
  t.half = head_dim / 2;
  t.cos.resize(static_cast<size_t>(count) * t.half);
  t.sin.resize(t.cos.size());
  for (uint32_t i = 0; i < t.half; ++i) {
    // As transformers: inv_freq in fp32, angle = fp32(position) * inv_freq in fp32.
    const float inv_freq =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / head_dim));
    for (uint32_t p = 0; p < count; ++p) {
      const float angle = static_cast<float>(first + p) * inv_freq;
      t.cos[static_cast<size_t>(p) * t.half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      t.sin[static_cast<size_t>(p) * t.half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return t;
}

void ApplyRope(float* x, uint32_t n_heads, uint32_t head_dim, const RopeTable& t) {
  const uint32_t half = head_dim / 2;
  for (int64_t p = 0; p < static_cast<int64_t>(t.count); ++p) {
    const float* c = &t.cos[p * half];
    const float* s = &t.sin[p * half];
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<size_t>(p) * n_heads + h) * head_dim;
      for (uint32_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void AddBias(float* x, uint32_t rows, uint32_t n, const float* b) {
  for (int64_t r = 0; r < static_cast<int64_t>(rows); ++r) {
    float* row = x + r * n;
    for (uint32_t i = 0; i < n; ++i) row[i] += b[i];
  }
}

void SiluMul(float* gate, const float* up, uint64_t n) {
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    const float g = gate[i];
    gate[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

}  // namespace kvstash::model
