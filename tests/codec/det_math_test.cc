#include "codec/entropy/det_math.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvstash::entropy {
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

}  // namespace
}  // namespace kvstash::entropy
