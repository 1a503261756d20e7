#include "codec/spec/ordinal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kvstash/dtype.h"

namespace kvstash::spec {
namespace {

// Checks a 16-bit format's ordinal map: from_ordinal inverts ordinal, ordinal is a
// bijection, and over the non-NaN patterns (as to_float decodes them) ordinal order is
// value order with no gaps. Returns the number of non-NaN patterns.
int ExpectMonotoneBijection(uint16_t (*ordinal)(uint16_t), uint16_t (*from_ordinal)(uint16_t),
                            float (*to_float)(uint16_t)) {
  std::set<uint16_t> seen;
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto x = static_cast<uint16_t>(b);
    EXPECT_EQ(from_ordinal(ordinal(x)), x);
    seen.insert(ordinal(x));
  }
  EXPECT_EQ(seen.size(), 65536u);
  uint16_t prev = 0;
  float prev_v = -INFINITY;
  bool first = true;
  int non_nan = 0;
  for (uint32_t o = 0; o < 65536; ++o) {
    const float v = to_float(from_ordinal(static_cast<uint16_t>(o)));
    if (std::isnan(v)) continue;
    ++non_nan;
    if (!first) {
      EXPECT_GE(v, prev_v) << o;
      EXPECT_EQ(o, prev + 1u) << "non-NaN ordinals are contiguous";
    }
    prev = static_cast<uint16_t>(o);
    prev_v = v;
    first = false;
  }
  return non_nan;
}

TEST(OrdinalTest, Bf16IsMonotoneBijection) {
  // 127 NaN mantissas per sign.
  EXPECT_EQ(ExpectMonotoneBijection(Bf16Ordinal, Bf16FromOrdinal, Bf16ToF32), 65536 - 2 * 127);
  EXPECT_EQ(Bf16Ordinal(0x0000), 0x8000);  // +0
  EXPECT_EQ(Bf16Ordinal(0x8000), 0x7FFF);  // -0 just below
  EXPECT_EQ(Bf16Ordinal(0x3F80) + 1, Bf16Ordinal(0x3F81));
}

TEST(OrdinalTest, F16IsMonotoneBijection) {
  // 1023 NaN mantissas per sign.
  EXPECT_EQ(ExpectMonotoneBijection(F16Ordinal, F16FromOrdinal, F16ToF32), 65536 - 2 * 1023);
  EXPECT_EQ(F16Ordinal(0x0000), 0x8000);  // +0
  EXPECT_EQ(F16Ordinal(0x8000), 0x7FFF);  // -0 just below
  EXPECT_EQ(F16Ordinal(0x7C00), 0xFC00);  // +Inf above every finite value
}

TEST(OrdinalTest, Fp8IsMonotoneBijection) {
  std::set<uint8_t> seen;
  float prev_v = -INFINITY;
  for (uint32_t o = 0; o < 256; ++o) {
    const uint8_t b = Fp8FromOrdinal(static_cast<uint8_t>(o));
    EXPECT_EQ(Fp8Ordinal(b), o);
    seen.insert(b);
    const float v = Fp8E4M3ToF32(b);
    if (std::isnan(v)) continue;
    EXPECT_GE(v, prev_v) << o;
    prev_v = v;
  }
  EXPECT_EQ(seen.size(), 256u);
}

TEST(OrdinalTest, UlpMatchesValueSpacing) {
  for (uint16_t b : {0x3F80, 0x4000, 0x0001, 0x0080, 0x4B00, 0xC2F0}) {
    const float v = Bf16ToF32(b);
    const float next = Bf16ToF32(Bf16FromOrdinal(static_cast<uint16_t>(Bf16Ordinal(b) + 1)));
    EXPECT_EQ(std::fabs(next - v), std::ldexp(1.0f, Bf16UlpLog2(b))) << std::hex << b;
  }
  // f16: 1.0, 2.0, the smallest subnormal and normal, 65504's neighbour, a negative.
  for (uint16_t b : {0x3C00, 0x4000, 0x0001, 0x0400, 0x7BFE, 0xC2F0}) {
    const float v = F16ToF32(b);
    const float next = F16ToF32(F16FromOrdinal(static_cast<uint16_t>(F16Ordinal(b) + 1)));
    EXPECT_EQ(std::fabs(next - v), std::ldexp(1.0f, F16UlpLog2(b))) << std::hex << b;
  }
  EXPECT_EQ(F16UlpLog2(0x3C00), -10);
  EXPECT_EQ(F16UlpLog2(0x0001), -24);
  for (uint8_t b : {0x38, 0x01, 0x08, 0x70}) {
    const float v = Fp8E4M3ToF32(b);
    const float next = Fp8E4M3ToF32(static_cast<uint8_t>(b + 1));
    EXPECT_EQ(next - v, std::ldexp(1.0f, Fp8UlpLog2(b))) << int(b);
  }
}

}  // namespace
}  // namespace kvstash::spec
