#include "codec/dckv/dckv_gelu.h"

#include <bit>

namespace kvstash::dckv {
namespace {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound - kRound rounds x to an integer
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// Cephes expf: e^r ~= 1 + r + r^2 p(r) for |r| <= ln(2) / 2.
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
constexpr float kTwoSqrtTwoOverPi = 1.5957691216057308f;
constexpr float kCubic = 0.044715f;
constexpr float kExpClamp = 80.0f;

}  // namespace

float GeluExp(float t) {
  const float n = (t * kLog2e + kRound) - kRound;
  float r = t - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  const float y = (p * (r * r) + r) + 1.0f;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return y * scale;
}

float Gelu(float a) {
  a = a > kGeluClamp ? kGeluClamp : a;
  a = a >= -kGeluClamp ? a : -kGeluClamp;
  float v = kTwoSqrtTwoOverPi * (a + kCubic * ((a * a) * a));
  v = v > kExpClamp ? kExpClamp : (v < -kExpClamp ? -kExpClamp : v);
  const float s = 1.0f / (1.0f + GeluExp(-v));
  return a * s;
}

void GeluInPlace(std::span<float> values) {
  for (float& v : values) v = Gelu(v);
}

}  // namespace kvstash::dckv
