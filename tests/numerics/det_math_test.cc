// Deterministic math vs libm: accuracy bounds (libm is the independent reference), and
// golden bit patterns that pin the exact algorithm (any change of operation order
// changes them, which would break decoding of stored spec payloads).
#include "numerics/det_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

namespace kvstash::spec {
namespace {

int64_t UlpDistance(float a, float b) {
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

TEST(DetMathTest, ExpWithinTwoUlpOfLibm) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-87.0f, 88.5f);
  int64_t worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = u(rng);
    const float ref = static_cast<float>(std::exp(static_cast<double>(x)));
    worst = std::max(worst, UlpDistance(DetExp(x), ref));
  }
  EXPECT_LE(worst, 2);
  EXPECT_EQ(DetExp(0.0f), 1.0f);
  EXPECT_EQ(DetExp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isinf(DetExp(89.0f)));
  EXPECT_TRUE(std::isnan(DetExp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_LE(UlpDistance(DetExp(88.72f), static_cast<float>(std::exp(static_cast<double>(88.72f)))), 2);
}

TEST(DetMathTest, RsqrtWithinThreeUlp) {
  std::mt19937 rng(4);
  int64_t worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng() % 0x7F000000u) + 0x00000001u);
    const float ref = static_cast<float>(1.0 / std::sqrt(static_cast<double>(x)));
    worst = std::max(worst, UlpDistance(DetRsqrt(x), ref));
  }
  EXPECT_LE(worst, 3);
  EXPECT_TRUE(std::isinf(DetRsqrt(0.0f)));
  EXPECT_TRUE(std::isnan(DetRsqrt(-1.0f)));
  EXPECT_EQ(DetRsqrt(std::numeric_limits<float>::infinity()), 0.0f);
}

TEST(DetMathTest, SiluMatchesDefinition) {
  for (float x : {-20.0f, -3.0f, -0.5f, 0.0f, 0.5f, 3.0f, 20.0f}) {
    const double ref = x / (1.0 + std::exp(-static_cast<double>(x)));
    EXPECT_NEAR(DetSilu(x), ref, 4e-7 * std::max(1.0, std::fabs(ref))) << x;
  }
}

TEST(DetMathTest, GoldenBitsPinTheAlgorithm) {
  // Values produced by this implementation when the format was fixed (v1). A change
  // here is a format change: stored spec payloads would no longer decode.
  EXPECT_EQ(std::bit_cast<uint32_t>(DetExp(1.0f)), 0x402DF854u);
  EXPECT_EQ(std::bit_cast<uint32_t>(DetExp(-3.25f)), 0x3D1ED1B4u);
  EXPECT_EQ(std::bit_cast<uint32_t>(DetExp(10.5f)), 0x470DDB81u);
  EXPECT_EQ(std::bit_cast<uint32_t>(DetSilu(1.5f)), 0x3F9CF96Bu);
  EXPECT_EQ(std::bit_cast<uint32_t>(DetRsqrt(3.0f)), 0x3F13CD3Au);
  EXPECT_EQ(std::bit_cast<uint32_t>(DetRsqrt(2.0f)), 0x3F3504F3u);
}

}  // namespace
}  // namespace kvstash::spec
