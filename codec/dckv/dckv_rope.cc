#include "codec/dckv/dckv_rope.h"

#include <cmath>

namespace kvstash::dckv {

void RotateHead(float* x, uint32_t head_dim, uint32_t position, float theta, bool inverse) {
  const uint32_t half = head_dim / 2;
  for (uint32_t i = 0; i < half; ++i) {
    const float inv_freq =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / head_dim));
    const float angle = static_cast<float>(position) * inv_freq;
    const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
    float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    if (inverse) s = -s;
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

}  // namespace kvstash::dckv
