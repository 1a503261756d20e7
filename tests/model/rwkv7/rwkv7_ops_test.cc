// Hand-derived values for the fp32 primitives of the RWKV-7 forward.
#include "model/rwkv7/rwkv7_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvstash::rwkv7 {
namespace {

TEST(Rwkv7OpsTest, DotOverSizesAroundTheLaneCount) {
  // Integer data: every partial sum is exact, so the result is order-independent.
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 16u, 17u, 64u, 65u}) {
    std::vector<float> a(n), b(n);
    double want = 0.0;
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i % 5) - 2.0f;
      b[i] = static_cast<float>(i % 3) + 1.0f;
      want += static_cast<double>(a[i]) * b[i];
    }
    EXPECT_EQ(Dot(a.data(), b.data(), n), static_cast<float>(want)) << "n=" << n;
  }
}

TEST(Rwkv7OpsTest, DotUsesTheDocumentedLaneOrder) {
  // 16 terms: lane 0 sums 2^24 twice, lanes 1..7 sum 1 + 1 each. In lanes:
  // ((2^25 + 2) + (2 + 2)) + ((2 + 2) + (2 + 2)) = (2^25 + 4) + 8 = 2^25 + 12 (the first
  // + 2 ties to even and is lost). Left to right, every + 1 is lost: 2^25.
  std::vector<float> a(16, 1.0f), b(16, 1.0f);
  a[0] = a[8] = 16777216.0f;  // 2^24
  float lane[8];
  for (int l = 0; l < 8; ++l) lane[l] = a[l] + a[l + 8];
  const float want =
      ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  EXPECT_EQ(want, 33554444.0f);  // 2^25 + 12
  EXPECT_EQ(Dot(a.data(), b.data(), 16), want);
  float sequential = 0.0f;
  for (float x : a) sequential += x;
  EXPECT_NE(want, sequential);  // the test can tell the orders apart
}

TEST(Rwkv7OpsTest, MatVecRowMajor) {
  const std::vector<float> W = {1,  2, 3,   // row 0
                                -1, 0, 4};  // row 1
  const std::vector<float> x = {1, 10, 100};
  std::vector<float> out(2);
  MatVec(W, x, out);
  EXPECT_EQ(out, (std::vector<float>{321, 399}));
}

TEST(Rwkv7OpsTest, LayerNorm) {
  const std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 2, 1}, b = {0, 0, 0, 10};
  std::vector<float> out(4);
  LayerNorm(x, w, b, 0.0f, out);  // mean 2.5, var 1.25
  const double s = 1.0 / std::sqrt(1.25);
  EXPECT_NEAR(out[0], -1.5 * s, 1e-6);
  EXPECT_NEAR(out[1], -0.5 * s, 1e-6);
  EXPECT_NEAR(out[2], 2 * 0.5 * s, 1e-6);
  EXPECT_NEAR(out[3], 1.5 * s + 10, 1e-5);
  // eps enters under the square root; in place works.
  std::vector<float> y = {0, 2};
  const std::vector<float> one = {1, 1}, zero = {0, 0};
  LayerNorm(y, one, zero, 3.0f, y);  // mean 1, var 1 -> /sqrt(4)
  EXPECT_EQ(y, (std::vector<float>{-0.5f, 0.5f}));
}

TEST(Rwkv7OpsTest, GroupNormPerContiguousGroup) {
  std::vector<float> x = {1, 3, 10, 14};  // groups {1,3}: mean 2 var 1; {10,14}: mean 12 var 4
  const std::vector<float> w = {2, 2, 1, 1}, b = {0.5f, 0.5f, 0, 0};
  GroupNorm(x, 2, w, b, 0.0f, x);
  EXPECT_EQ(x, (std::vector<float>{-1.5f, 2.5f, -1.0f, 1.0f}));
}

TEST(Rwkv7OpsTest, L2NormalizeGroups) {
  std::vector<float> x = {3, 4, 0, 0, -6, 8};
  L2NormalizeGroups(x, 2);
  EXPECT_FLOAT_EQ(x[0], 0.6f);
  EXPECT_FLOAT_EQ(x[1], 0.8f);
  EXPECT_EQ(x[2], 0.0f);  // a zero group stays zero (norm clamped at 1e-12)
  EXPECT_EQ(x[3], 0.0f);
  EXPECT_FLOAT_EQ(x[4], -0.6f);
  EXPECT_FLOAT_EQ(x[5], 0.8f);
}

TEST(Rwkv7OpsTest, Sigmoid) {
  EXPECT_EQ(Sigmoid(0.0f), 0.5f);
  EXPECT_NEAR(Sigmoid(2.0f), 1.0 / (1.0 + std::exp(-2.0)), 1e-7);
  EXPECT_EQ(Sigmoid(-200.0f), 0.0f);
  EXPECT_EQ(Sigmoid(200.0f), 1.0f);
}

// N = 2, one head, worked by hand (all values exact in fp32):
//   S = [[1, 2], [3, 4]], w = [0.5, 0.25], kk = [1, 0], iclr = [0.5, 1], k = [1, 2],
//   v = [1, -1], r = [1, 1].
//   row 0: sa = 1; S00 = 0.5 - 1*0.5 + 1 = 1; S01 = 0.5 - 0 + 2 = 2.5; y0 = 3.5
//   row 1: sa = 3; S10 = 1.5 - 3*0.5 - 1 = -1; S11 = 1 - 0 - 2 = -1; y1 = -2
TEST(Rwkv7OpsTest, Wkv7HeadByHand) {
  std::vector<float> S = {1, 2, 3, 4};
  std::vector<float> y(2);
  Wkv7Head(S, /*r=*/std::vector<float>{1, 1}, /*w=*/std::vector<float>{0.5f, 0.25f},
           /*k=*/std::vector<float>{1, 2}, /*v=*/std::vector<float>{1, -1},
           /*kk=*/std::vector<float>{1, 0}, /*iclr=*/std::vector<float>{0.5f, 1}, y);
  EXPECT_EQ(S, (std::vector<float>{1, 2.5f, -1, -1}));
  EXPECT_EQ(y, (std::vector<float>{3.5f, -2}));
}

TEST(Rwkv7OpsTest, Wkv7DeltaRuleReplacesTheValueAlongKk) {
  // With w = 1, iclr = 1 and k = kk (unit), the update is S <- S (I - kk kk^T) + v kk^T:
  // reading back along kk (r = kk) returns exactly the newly written v.
  std::vector<float> S = {0.5f, -2, 7, 1};
  std::vector<float> y(2);
  const std::vector<float> kk = {0, 1}, ones = {1, 1}, v = {3, -4};
  Wkv7Head(S, /*r=*/kk, ones, /*k=*/kk, v, kk, ones, y);
  EXPECT_EQ(y, v);
  EXPECT_EQ(S, (std::vector<float>{0.5f, 3, 7, -4}));
}

}  // namespace
}  // namespace kvstash::rwkv7
