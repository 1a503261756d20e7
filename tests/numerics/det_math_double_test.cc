// Deterministic double-precision math (numerics/det_math_double.h) vs libm, the
// independent reference: e^x and erfc (frequency tables), log and sin/cos (RoPE tables).
#include "numerics/det_math_double.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace kvstash::numerics {
namespace {

TEST(DetMath, ExpMatchesLibmClosely) {
  EXPECT_EQ(DetExp(0.0), 1.0);
  EXPECT_EQ(DetExp(-800.0), 0.0);
  EXPECT_TRUE(std::isinf(DetExp(710.0)));
  for (double x = -700.0; x < 700.0; x += 0.37) {
    const double want = std::exp(x);
    EXPECT_NEAR(DetExp(x) / want, 1.0, 4e-15) << x;
  }
}

TEST(DetMath, ErfcMatchesLibmClosely) {
  for (double z = -4.0; z < 26.0; z += 0.013) {
    const double want = std::erfc(z);
    EXPECT_NEAR(DetErfc(z) / want, 1.0, 2e-10) << z;
  }
  EXPECT_EQ(DetErfc(0.0), 1.0);
  EXPECT_EQ(DetErfc(30.0), 0.0);  // underflows like the true value (~1e-393)
}

TEST(DetMathTest, DoubleHelpersAccurate) {
  for (double x : {1e-300, 1e-5, 0.5, 1.0, 2.0, 10000.0, 500000.0, 1e300}) {
    EXPECT_NEAR(DetLogD(x), std::log(x), 1e-14 * std::max(1.0, std::fabs(std::log(x)))) << x;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-200000.0, 200000.0);
  for (int i = 0; i < 20000; ++i) {
    const double x = i < 100 ? i * 0.7853981633974483 : u(rng);
    double s, c;
    DetSinCosD(x, &s, &c);
    EXPECT_NEAR(s, std::sin(x), 1e-10) << x;
    EXPECT_NEAR(c, std::cos(x), 1e-10) << x;
  }
}

}  // namespace
}  // namespace kvstash::numerics
