#include "numerics/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/support/test_util.h"

namespace kvstash::spec {
namespace {

TEST(QuantizeTest, RoundHalfEvenExact) {
  EXPECT_EQ(RoundHalfEven(0.5f), 0.0f);
  EXPECT_EQ(RoundHalfEven(1.5f), 2.0f);
  EXPECT_EQ(RoundHalfEven(2.5f), 2.0f);
  EXPECT_EQ(RoundHalfEven(-2.5f), -2.0f);
  EXPECT_EQ(RoundHalfEven(-0.49999997f), 0.0f);
  EXPECT_EQ(RoundHalfEven(126.5f), 126.0f);
  EXPECT_EQ(RoundHalfEven(3.7f), 4.0f);
}

TEST(QuantizeTest, PerRowScalesAndValues) {
  // Row 0: amax 2.54 -> scale 0.02; row 1 all zero -> scale 1.
  std::vector<float> x = {2.54f, -1.27f, 0.01f, 0.03f, 0.0f, 0.0f, 0.0f, 0.0f};
  Int8Rows q;
  ASSERT_OK(QuantizeRowsInt8(x, 2, 4, 4, &q));
  ASSERT_EQ(q.groups(), 1);
  EXPECT_FLOAT_EQ(q.scales[0], 2.54f / 127.0f);
  EXPECT_EQ(q.scales[1], 1.0f);
  EXPECT_EQ(q.q[0], 127);
  EXPECT_EQ(q.q[1], -64);  // -1.27 / 0.02 = -63.5 -> ties to even -64
  EXPECT_EQ(q.q[2], 0);    // 0.5 -> 0 (even)
  EXPECT_EQ(q.q[3], 2);    // 1.5 -> 2
  for (int i = 4; i < 8; ++i) EXPECT_EQ(q.q[i], 0);
}

TEST(QuantizeTest, GroupsSpecialsAndErrors) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {1.0f, -0.5f, 4.0f, nan, -inf, 2.0f, 0.25f};
  Int8Rows q;
  ASSERT_OK(QuantizeRowsInt8(x, 1, 7, 3, &q));  // groups: [0,3) [3,6) [6,7)
  ASSERT_EQ(q.groups(), 3);
  EXPECT_FLOAT_EQ(q.scales[0], 4.0f / 127.0f);
  EXPECT_FLOAT_EQ(q.scales[1], 2.0f / 127.0f);  // NaN and Inf ignored for amax
  EXPECT_EQ(q.q[3], 0);                         // NaN -> 0
  EXPECT_EQ(q.q[4], -127);                      // -Inf saturates
  EXPECT_EQ(q.q[5], 127);
  EXPECT_EQ(q.q[6], 127);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) {
      const float back = q.q[i] * q.scales[i < 3 ? 0 : (i < 6 ? 1 : 2)];
      EXPECT_NEAR(back, x[i], q.scales[i < 3 ? 0 : (i < 6 ? 1 : 2)] / 2 + 1e-7f);
    }
  }
  EXPECT_STATUS(QuantizeRowsInt8(x, 2, 4, 4, &q), kInvalidArgument);
  EXPECT_STATUS(QuantizeRowsInt8(x, 1, 7, 0, &q), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::spec

namespace kvstash::spec {
namespace {

TEST(QuantizeTest, Int16Rows) {
  std::vector<float> x = {3.2767f, -1.0f, 0.00005f, 0.00015f};
  Int16Rows q;
  ASSERT_OK(QuantizeRowsInt16(x, 1, 4, 4, &q));
  EXPECT_FLOAT_EQ(q.scales[0], 3.2767f / 32767.0f);
  EXPECT_EQ(q.q[0], 32767);
  EXPECT_EQ(q.q[1], -10000);
  EXPECT_EQ(q.q[2], 0);  // 0.5 -> 0
  EXPECT_EQ(q.q[3], 2);  // 1.5 -> 2
}

}  // namespace
}  // namespace kvstash::spec
