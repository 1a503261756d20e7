// ggml's Q8_1 quantiser, the Q4_1 x Q8_1 block dot and rms_norm (numerics/ggml_ops.h),
// against values derived by hand from the block formats (ggml-common.h) and from the
// AVX2 quantize_row_q8_1 of ggml-cpu (d = amax / 127, id = 127 / amax, round half to
// even, s = fp16(d * sum q)).
#include "numerics/ggml_ops.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvstash::model::ggml {
namespace {

// amax = 127: d = 1, id = 1, so q = x rounded half to even (roundf would give 1, 3,
// -3 for 0.5, 2.5, -2.5). sum q = 127 - 127 + 0 + 2 + 2 + 0 - 2 - 2 + 3 = 3.
TEST(GgmlOpsTest, QuantizeQ8_1RoundsHalfToEven) {
  std::vector<float> x(kBlock, 0.0f);
  const float v[] = {127.0f, -127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.49f};
  const int8_t want[] = {127, -127, 0, 2, 2, 0, -2, -2, 3};
  std::copy(std::begin(v), std::end(v), x.begin());
  BlockQ8_1 b;
  QuantizeRowQ8_1(x.data(), kBlock, &b);
  EXPECT_EQ(b.d, 0x3C00);  // fp16 1.0
  EXPECT_EQ(b.s, 0x4200);  // fp16 3.0
  for (size_t j = 0; j < kBlock; ++j) EXPECT_EQ(b.qs[j], j < 9 ? want[j] : 0) << j;
}

// Two blocks: amax = 63.5 gives d = 0.5 and id = 2 exactly: 63.5 -> 127, 0.25 -> 0.5 -> 0,
// 0.75 -> 1.5 -> 2, -10.1 -> -20.2 -> -20; sum 109, s = 54.5 = fp16 0x52D0. The second
// block is all zeros: d = s = 0, id = 0.
TEST(GgmlOpsTest, QuantizeQ8_1ScalesPerBlock) {
  std::vector<float> x(2 * kBlock, 0.0f);
  x[3] = 63.5f;
  x[10] = 0.25f;
  x[20] = 0.75f;
  x[31] = -10.1f;
  BlockQ8_1 b[2];
  QuantizeRowQ8_1(x.data(), 2 * kBlock, b);
  EXPECT_EQ(b[0].d, 0x3800);  // fp16 0.5
  EXPECT_EQ(b[0].s, 0x52D0);  // fp16 54.5
  EXPECT_EQ(b[0].qs[3], 127);
  EXPECT_EQ(b[0].qs[10], 0);
  EXPECT_EQ(b[0].qs[20], 2);
  EXPECT_EQ(b[0].qs[31], -20);
  EXPECT_EQ(b[0].qs[0], 0);
  EXPECT_EQ(b[1].d, 0);
  EXPECT_EQ(b[1].s, 0);
  for (int8_t q : b[1].qs) EXPECT_EQ(q, 0);
}

// Q4_1 block: d = 0.5 (fp16 0x3800), m = -1 (0xBC00), qs[j] = j | (15 - j) << 4, so
// w[j] = 0.5 j - 1 and w[16 + j] = 0.5 (15 - j) - 1. Q8_1 block: d = 1, q[e] = e - 16,
// s = fp16(sum q) = -16. sumi = sum_j j (j - 16) + sum_j (15 - j) j = -680 + 560 = -120;
// dot = 0.5 * 1 * -120 + (-1) * (-16) = -44, which is also sum_e w[e] * q[e].
TEST(GgmlOpsTest, DotQ4_1Q8_1OneBlock) {
  std::vector<uint8_t> stored = {0x00, 0x38, 0x00, 0xBC};
  for (uint32_t j = 0; j < 16; ++j) stored.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  UnpackedQ4_1 w;
  ASSERT_TRUE(UnpackQ4_1(stored, std::span(&w, 1)).ok());
  EXPECT_EQ(w.d, 0.5f);
  EXPECT_EQ(w.m, -1.0f);
  EXPECT_EQ(w.q[1], 1);
  EXPECT_EQ(w.q[17], 14);
  BlockQ8_1 x;
  x.d = 0x3C00;
  x.s = 0xCC00;  // fp16 -16
  for (int e = 0; e < 32; ++e) x.qs[e] = static_cast<int8_t>(e - 16);
  EXPECT_EQ(DotQ4_1Q8_1(&w, &x, 1), -44.0f);
  // The same block twice: -88 (acc -120, summs 32).
  const UnpackedQ4_1 w2[2] = {w, w};
  const BlockQ8_1 x2[2] = {x, x};
  EXPECT_EQ(DotQ4_1Q8_1(w2, x2, 2), -88.0f);
}

TEST(GgmlOpsTest, UnpackQ4_1RejectsPartialBlocks) {
  std::vector<uint8_t> stored(19);
  UnpackedQ4_1 w;
  EXPECT_FALSE(UnpackQ4_1(stored, std::span(&w, 1)).ok());
}

// rows of 2s: mean of squares 4 (+ eps 0) -> scale 1/2 -> 1 * w; rows of 1s with eps 3:
// scale 1/sqrt(4) = 1/2.
TEST(GgmlOpsTest, RmsNormRow) {
  const float w[4] = {1.0f, 2.0f, -3.0f, 0.5f};
  float twos[4] = {2, 2, 2, 2};
  RmsNormRow(twos, 4, w, 0.0f);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(twos[i], w[i]) << i;
  float ones[4] = {1, 1, 1, 1};
  RmsNormRow(ones, 4, w, 3.0f);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ones[i], 0.5f * w[i]) << i;
}

}  // namespace
}  // namespace kvstash::model::ggml
