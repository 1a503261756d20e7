#include "codec/dckv/dckv_rope.h"

#include <cmath>

namespace kvstash::dckv {

namespace {

float InvFreq(uint32_t i, uint32_t head_dim, float theta) {
  return static_cast<float>(1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / head_dim));
}

// The rotation of one pair with the angle's (c, s).
void RotatePair(float* x, uint32_t i, uint32_t half, float c, float s) {
  const float a = x[i], b = x[i + half];
  x[i] = a * c - b * s;
  x[i + half] = b * c + a * s;
}

}  // namespace

void RotateHead(float* x, uint32_t head_dim, uint32_t position, float theta, bool inverse) {
  const uint32_t half = head_dim / 2;
  for (uint32_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * InvFreq(i, head_dim, theta);
    const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
    const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    RotatePair(x, i, half, c, inverse ? -s : s);
  }
}

RopeTable::RopeTable(uint32_t head_dim, float theta, uint32_t first_position, uint32_t count)
    : half_(head_dim / 2), first_(first_position) {
  cos_.resize(static_cast<size_t>(count) * half_);
  sin_.resize(cos_.size());
  for (uint32_t i = 0; i < half_; ++i) {
    const float inv_freq = InvFreq(i, head_dim, theta);
    for (uint32_t p = 0; p < count; ++p) {
      const float angle = static_cast<float>(first_position + p) * inv_freq;
      cos_[static_cast<size_t>(p) * half_ + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[static_cast<size_t>(p) * half_ + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void RopeTable::Rotate(float* x, uint32_t position, bool inverse) const {
  const size_t at = static_cast<size_t>(position - first_) * half_;
  for (uint32_t i = 0; i < half_; ++i) {
    const float s = sin_[at + i];
    RotatePair(x, i, half_, cos_[at + i], inverse ? -s : s);
  }
}

}  // namespace kvstash::dckv
