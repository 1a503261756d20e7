#include "codec/entropy/normalize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

using V = std::vector<uint32_t>;

V Norm(std::vector<double> w, int p) { return NormalizeFrequencies(w, p).value(); }

TEST(NormalizeFrequencies, HandDerivedCases) {
  EXPECT_EQ(Norm({1, 1, 1, 1}, 10), (V{256, 256, 256, 256}));
  // t = (341.33, 682.67): the larger remainder (index 1) takes the missing unit.
  EXPECT_EQ(Norm({1, 2}, 10), (V{341, 683}));
  // Equal remainders: the lowest index wins.
  EXPECT_EQ(Norm({1, 1, 1}, 10), (V{342, 341, 341}));
  // Floors overshoot by one; only index 2 can give.
  EXPECT_EQ(Norm({1e-9, 1e-9, 1}, 10), (V{1, 1, 1022}));
  // t = (0, 0, 100, 924): two floors of 1 overshoot by 2; t/f ties (1.0) go to index 2
  // first, then index 3 has the smaller t/f (1 < 100/99).
  EXPECT_EQ(Norm({0, 0, 100, 924}, 10), (V{1, 1, 99, 923}));
  EXPECT_EQ(Norm({5}, 12), (V{4096}));
  // As many entries as slots: every one gets exactly 1.
  EXPECT_EQ(Norm(std::vector<double>(1024, 0.5), 10), V(1024, 1));
}

TEST(NormalizeFrequencies, RandomWeightsSumToTotalWithFloorOne) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = 10 + trial % 6;
    const size_t n = 1 + rng() % 700;
    std::vector<double> w(n);
    for (double& x : w) {
      const int kind = static_cast<int>(rng() % 4);
      x = kind == 0 ? 0.0 : std::ldexp(static_cast<double>(rng() % 1000), -static_cast<int>(rng() % 30));
    }
    w[rng() % n] = 1.0;
    ASSERT_OK_AND_ASSIGN(V f, NormalizeFrequencies(w, p));
    uint64_t total = 0;
    for (uint32_t x : f) {
      EXPECT_GE(x, 1u);
      total += x;
    }
    EXPECT_EQ(total, uint64_t{1} << p);
  }
}

TEST(NormalizeFrequencies, RejectsBadInput) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>{}, 12), kInvalidArgument);
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>(1025, 1.0), 10), kInvalidArgument);
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>{1, -1}, 12), kInvalidArgument);
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>{1, std::nan("")}, 12), kInvalidArgument);
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>{1, inf}, 12), kInvalidArgument);
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>{0, 0}, 12), kInvalidArgument);
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>{1, 1}, 9), kInvalidArgument);
  EXPECT_STATUS(NormalizeFrequencies(std::vector<double>{1, 1}, 16), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::entropy
