// The deterministic GELU of the correction nets (dckv_gelu.h): its exp against the
// double-precision exp, the GELU against the exact GELU (std::erf in double) and
// against its own tanh-form definition evaluated in double, special inputs, and a
// few output bit patterns pinned so that a change of the definition is noticed.
#include "codec/dckv/dckv_gelu.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace kvstash::dckv {
namespace {

double ExactGelu(double a) { return 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))); }

// 0.5 a (1 + tanh(u)) = a sigmoid(2u), the sigmoid form (accurate where tanh ~ -1).
double TanhGelu(double a) {
  const double u = std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a);
  return a / (1.0 + std::exp(-2.0 * u));
}

TEST(DckvGelu, ExpWithinFewUlpOfDouble) {
  double worst = 0;
  for (double t = -80.0; t <= 80.0; t += 1.0 / 256) {
    const double want = std::exp(static_cast<double>(static_cast<float>(t)));
    const double got = GeluExp(static_cast<float>(t));
    worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 3.0 * std::ldexp(1.0, -24)) << worst;  // < 3 ulp of fp32
  EXPECT_EQ(GeluExp(0.0f), 1.0f);
}

// The documented bounds (dckv_gelu.h): <= 4.8e-4 absolute against the exact GELU,
// <= 1.2e-5 relative + 1e-33 absolute against the tanh form in double (fp32 rounding of
// v amplified by e^v in the negative tail; 1e-33: the exp clamp at -80), and <= 1e-6
// absolute.
TEST(DckvGelu, SweepAgainstExactAndTanhForm) {
  double worst_exact = 0, worst_exact_at = 0, worst_form = 0, worst_form_abs = 0;
  for (double a = -20.0; a <= 20.0; a += 1.0 / 1024) {
    const float af = static_cast<float>(a);
    const double got = Gelu(af);
    const double exact_err = std::abs(got - ExactGelu(af));
    if (exact_err > worst_exact) worst_exact = exact_err, worst_exact_at = a;
    const double form = TanhGelu(af);
    worst_form_abs = std::max(worst_form_abs, std::abs(got - form));
    worst_form = std::max(worst_form, std::max(0.0, std::abs(got - form) - 1e-33) / std::abs(form));
  }
  std::printf("[ info ] max |Gelu - exact GELU| %.3g at %.4f; vs tanh form: max rel. %.3g, max abs. %.3g\n",
              worst_exact, worst_exact_at, worst_form, worst_form_abs);
  EXPECT_LE(worst_exact, 4.8e-4);
  EXPECT_GT(worst_exact, 1e-4);  // the tanh form's own error is visible: the sweep is real
  EXPECT_LE(worst_form, 1.2e-5);
  EXPECT_LE(worst_form_abs, 1e-6);
}

TEST(DckvGelu, SpecialInputs) {
  EXPECT_EQ(Gelu(0.0f), 0.0f);
  EXPECT_EQ(Gelu(1e6f), kGeluClamp);
  EXPECT_EQ(Gelu(std::numeric_limits<float>::infinity()), kGeluClamp);
  EXPECT_EQ(Gelu(kGeluClamp), kGeluClamp);
  for (float a : {-std::numeric_limits<float>::infinity(), -1e30f, std::numeric_limits<float>::quiet_NaN(),
                  -kGeluClamp}) {
    const float g = Gelu(a);
    EXPECT_TRUE(std::isfinite(g));
    EXPECT_LE(g, 0.0f);
    EXPECT_GT(g, -1e-25f);
    EXPECT_EQ(std::bit_cast<uint32_t>(g),
              std::bit_cast<uint32_t>(Gelu(-kGeluClamp)));  // NaN, -inf clamp to -16384
  }
  EXPECT_NEAR(Gelu(10.0f), 10.0f, 1e-6f);
  EXPECT_NEAR(Gelu(-10.0f), 0.0f, 1e-6f);
}

// Output bits of the definition (any change of the constants or the order of the
// operations changes them, and with them every decoded chunk of an artifact with a
// decoder net).
TEST(DckvGelu, PinnedBits) {
  const struct {
    float a;
    uint32_t bits;
  } cases[] = {
      {1.0f, 0x3f57585cu},  {-0.5f, 0xbe1dfd25u},  {2.25f, 0x400e4255u},
      {-3.0f, 0xbb6e614cu}, {0.001f, 0x3a032d35u},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(std::bit_cast<uint32_t>(Gelu(c.a)), c.bits) << c.a;
  }
}

}  // namespace
}  // namespace kvstash::dckv
