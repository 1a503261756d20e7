#include "model/rwkv7/rwkv7_ops.h"

#include <algorithm>
#include <cmath>

namespace kvstash::rwkv7 {

float Dot(const float* a, const float* b, size_t n) {
  float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const size_t body = n - n % 8;
  for (size_t i = 0; i < body; i += 8) {
    for (size_t l = 0; l < 8; ++l) lane[l] += a[i + l] * b[i + l];
  }
  float acc = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
              ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (size_t i = body; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void MatVec(std::span<const float> W, std::span<const float> x, std::span<float> out) {
  const size_t cols = x.size();
  for (size_t o = 0; o < out.size(); ++o) out[o] = Dot(W.data() + o * cols, x.data(), cols);
}

namespace {

// Normalises x (n values) into out with the affine w, b (two-pass mean / variance).
void NormalizeAffine(const float* x, size_t n, const float* w, const float* b, float eps,
                     float* out) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float sq = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    sq += d * d;
  }
  const float var = sq / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(var + eps);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * inv * w[i] + b[i];
}

}  // namespace

void LayerNorm(std::span<const float> x, std::span<const float> w, std::span<const float> b,
               float eps, std::span<float> out) {
  NormalizeAffine(x.data(), x.size(), w.data(), b.data(), eps, out.data());
}

void GroupNorm(std::span<const float> x, size_t groups, std::span<const float> w,
               std::span<const float> b, float eps, std::span<float> out) {
  const size_t n = x.size() / groups;
  for (size_t g = 0; g < groups; ++g) {
    NormalizeAffine(x.data() + g * n, n, w.data() + g * n, b.data() + g * n, eps,
                    out.data() + g * n);
  }
}

void L2NormalizeGroups(std::span<float> x, size_t group_size) {
  for (size_t g = 0; g + group_size <= x.size(); g += group_size) {
    float sq = 0.0f;
    for (size_t i = 0; i < group_size; ++i) sq += x[g + i] * x[g + i];
    const float norm = std::max(std::sqrt(sq), 1e-12f);
    for (size_t i = 0; i < group_size; ++i) x[g + i] /= norm;
  }
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void Wkv7Head(std::span<float> S, std::span<const float> r, std::span<const float> w,
              std::span<const float> k, std::span<const float> v, std::span<const float> kk,
              std::span<const float> iclr, std::span<float> y) {
  const size_t n = r.size();
  for (size_t i = 0; i < n; ++i) {
    float* row = S.data() + i * n;
    const float sa = Dot(row, kk.data(), n);
    for (size_t j = 0; j < n; ++j) {
      row[j] = (row[j] * w[j] - sa * (kk[j] * iclr[j])) + v[i] * k[j];
    }
    y[i] = Dot(row, r.data(), n);
  }
}

}  // namespace kvstash::rwkv7
