// Exhaustive dtype conversion tests. References are independent of kvstash/dtype_bits.h:
// fp16 against GCC's _Float16 (libgcc / F16C), bf16 and fp8 against nearest-value
// searches over the enumerated target values computed with ldexp in double.
#include "kvstash/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/support/test_util.h"

namespace kvstash {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t U(float f) { return std::bit_cast<uint32_t>(f); }

// Test inputs around every target value: the value, the midpoints to its neighbours,
// and one fp32 ulp either side of them, plus random floats over the whole range.
std::vector<float> ProbePoints(const std::vector<double>& sorted_values) {
  std::vector<float> pts;
  for (size_t i = 0; i < sorted_values.size(); ++i) {
    const float v = static_cast<float>(sorted_values[i]);
    pts.push_back(v);
    if (i + 1 < sorted_values.size()) {
      const float mid = static_cast<float>((sorted_values[i] + sorted_values[i + 1]) / 2);
      pts.push_back(mid);
      pts.push_back(std::nextafter(mid, 0.0f));
      pts.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) pts.push_back(F(rng()));
  return pts;
}

// ---------------------------------------------------------------- bf16

double Bf16Value(uint16_t b) {  // independent: sign * (1 + m/128) * 2^(e-127)
  const int s = b >> 15, e = (b >> 7) & 0xFF, m = b & 0x7F;
  const double mag = e == 0 ? std::ldexp(m / 128.0, -126) : std::ldexp(1 + m / 128.0, e - 127);
  return s ? -mag : mag;
}

TEST(DtypeTest, Bf16ToF32AllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = Bf16ToF32(h);
    const int e = (b >> 7) & 0xFF;
    if (e == 0xFF) {
      if ((b & 0x7F) == 0) EXPECT_TRUE(std::isinf(f) && std::signbit(f) == (b >> 15));
      else EXPECT_TRUE(std::isnan(f)) << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), Bf16Value(h)) << b;
    EXPECT_EQ(std::signbit(f), (b >> 15) != 0) << b;  // -0 stays -0
    EXPECT_EQ(F32ToBf16(f), h) << "bf16 -> f32 -> bf16 must be identity for " << b;
  }
}

uint16_t RefF32ToBf16(float x) {
  const uint32_t u = U(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // truncation, toward zero
  const uint16_t hi = static_cast<uint16_t>(lo + 1);   // next magnitude up
  const double dl = std::fabs(Bf16Value(lo) - x);
  if (((hi >> 7) & 0xFF) == 0xFF) {  // the next magnitude is Inf: IEEE overflow rule
    const double max_bf16 = Bf16Value(lo);
    const double half_ulp = std::ldexp(1.0, 127 - 8);  // half an ulp at the top binade
    if (std::fabs(static_cast<double>(x)) >= std::fabs(max_bf16) + half_ulp) return hi;
    return lo;
  }
  const double dh = std::fabs(Bf16Value(hi) - x);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(DtypeTest, F32ToBf16RoundsNearestEven) {
  std::vector<double> values;
  for (uint32_t b = 0; b < 0x7F80; ++b) values.push_back(Bf16Value(static_cast<uint16_t>(b)));
  for (float x : ProbePoints(values)) {
    for (float v : {x, -x}) {
      if (std::isnan(v) || std::isinf(v)) continue;
      ASSERT_EQ(F32ToBf16(v), RefF32ToBf16(v)) << std::hexfloat << v;
    }
  }
}

TEST(DtypeTest, Bf16Specials) {
  EXPECT_EQ(F32ToBf16(0.0f), 0x0000);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(F32ToBf16(F(0x7F7FFFFF)), 0x7F80);  // FLT_MAX rounds up to Inf
  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBf16(F(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(F32ToBf16(F(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(F32ToBf16(F(0x00000001)), 0x0000);  // tiny subnormal
  // Every NaN stays NaN with its sign, including signalling NaNs whose payload is
  // only in the low bits that truncation would drop.
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t b = F32ToBf16(F(nan));
    EXPECT_TRUE(std::isnan(Bf16ToF32(b))) << std::hex << nan;
    EXPECT_EQ(b >> 15, nan >> 31);
  }
}

// ---------------------------------------------------------------- fp16

TEST(DtypeTest, F16ToF32MatchesCompilerAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const _Float16 ref = std::bit_cast<_Float16>(h);
    const float expect = static_cast<float>(ref);
    const float got = F16ToF32(h);
    if (std::isnan(expect)) {
      EXPECT_TRUE(std::isnan(got)) << b;
      EXPECT_EQ(std::signbit(got), std::signbit(expect)) << b;
    } else {
      EXPECT_EQ(U(got), U(expect)) << b;
      EXPECT_EQ(F32ToF16(got), h) << b;
    }
  }
}

TEST(DtypeTest, F32ToF16MatchesCompiler) {
  std::vector<double> values;
  for (uint32_t b = 0; b < 0x7C00; ++b) {
    values.push_back(static_cast<double>(std::bit_cast<_Float16>(static_cast<uint16_t>(b))));
  }
  for (float x : ProbePoints(values)) {
    for (float v : {x, -x}) {
      const uint16_t got = F32ToF16(v);
      const uint16_t expect = std::bit_cast<uint16_t>(static_cast<_Float16>(v));
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(F16ToF32(got)));
        continue;
      }
      ASSERT_EQ(got, expect) << std::hexfloat << v;
    }
  }
}

// ---------------------------------------------------------------- fp8 e4m3fn

double Fp8Value(uint8_t b) {  // OCP E4M3: bias 7, subnormals m/8 * 2^-6
  const int s = b >> 7, e = (b >> 3) & 0xF, m = b & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(DtypeTest, Fp8ToF32AllPatterns) {
  EXPECT_EQ(Fp8E4M3ToF32(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToF32(0x08), std::ldexp(1.0f, -6));
  for (uint32_t b = 0; b < 256; ++b) {
    const auto q = static_cast<uint8_t>(b);
    const float f = Fp8E4M3ToF32(q);
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << b;
      EXPECT_EQ(F32ToFp8E4M3(f), q) << "NaN keeps its sign";
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), Fp8Value(q)) << b;
    EXPECT_EQ(std::signbit(f), (b >> 7) != 0) << b;
    EXPECT_EQ(F32ToFp8E4M3(f), q) << "fp8 -> f32 -> fp8 identity for " << b;
  }
}

uint8_t RefF32ToFp8(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7E;  // saturating
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (uint8_t c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(Fp8Value(c) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | best;
}

TEST(DtypeTest, F32ToFp8RoundsNearestEvenAndSaturates) {
  std::vector<double> values;
  for (uint8_t b = 0; b <= 0x7E; ++b) values.push_back(Fp8Value(b));
  values.push_back(464.0);  // midpoint above max: probes saturation
  std::vector<float> pts = ProbePoints(values);
  pts.resize(values.size() * 4 + 20000);  // the full brute-force reference is slow
  for (float x : pts) {
    for (float v : {x, -x}) {
      if (std::isnan(v)) continue;
      ASSERT_EQ(F32ToFp8E4M3(v), RefF32ToFp8(v)) << std::hexfloat << v;
    }
  }
  EXPECT_EQ(F32ToFp8E4M3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(F32ToFp8E4M3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(F32ToFp8E4M3(1e30f), 0x7E);
  EXPECT_EQ(F32ToFp8E4M3(-0.0f), 0x80);
  EXPECT_EQ(F32ToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);  // tie to even 0
  EXPECT_EQ(F32ToFp8E4M3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(F32ToFp8E4M3(F(0x7FC00000)), 0x7F);
  EXPECT_EQ(F32ToFp8E4M3(F(0xFFC00000)), 0xFF);
}

TEST(DtypeTest, ScaledFp8RoundTrip) {
  std::vector<float> x = {0.5f, -3.0f, 100.0f, 1000.0f, -0.0f};
  const float scale = ComputeFp8Scale(x);
  EXPECT_FLOAT_EQ(scale, 1000.0f / 448.0f);
  std::vector<uint8_t> q(x.size());
  ASSERT_OK(QuantizeFp8E4M3(x, scale, q));
  std::vector<float> back(x.size());
  ASSERT_OK(DequantizeFp8E4M3(q, scale, back));
  EXPECT_EQ(q[3], 0x7E);                  // amax maps to 448
  EXPECT_FLOAT_EQ(back[3], 448.0f * scale);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(back[i], Fp8E4M3ToF32(F32ToFp8E4M3(x[i] / scale)) * scale);
    EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) * 0.0625 + 1e-6);  // e4m3: 3 mantissa bits
  }
  EXPECT_EQ(ComputeFp8Scale(std::vector<float>{0.0f, -0.0f}), 1.0f);
  EXPECT_STATUS(QuantizeFp8E4M3(x, 0.0f, q), kInvalidArgument);
  EXPECT_STATUS(QuantizeFp8E4M3(x, scale, std::span<uint8_t>(q).first(2)), kInvalidArgument);
}

TEST(DtypeTest, NamesAndSizes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3, DType::kU8,
                  DType::kI32}) {
    ASSERT_OK_AND_ASSIGN(DType back, ParseDType(DTypeName(t)));
    EXPECT_EQ(back, t);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFP8E4M3), 1u);
  EXPECT_STATUS(ParseDType("int4"), kInvalidArgument);
  EXPECT_FALSE(IsValidDType(0));
  EXPECT_FALSE(IsValidDType(7));
}

}  // namespace
}  // namespace kvstash
