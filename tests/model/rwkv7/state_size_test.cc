#include "model/rwkv7/state_size.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/support/test_util.h"

namespace kvstash::rwkv7 {
namespace {

std::vector<uint8_t> FloatBytes(const std::vector<uint32_t>& bits) {
  std::vector<uint8_t> out(bits.size() * 4);
  for (size_t i = 0; i < bits.size(); ++i) {
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(bits[i] >> (8 * b));
  }
  return out;
}

TEST(StateSizeTest, EntropyOfEmptyAndConstantIsZero) {
  ASSERT_OK_AND_ASSIGN(double e, BytePlaneEntropyBytes({}));
  EXPECT_EQ(e, 0.0);
  const std::vector<uint8_t> same = FloatBytes(std::vector<uint32_t>(100, 0x3F800000u));
  ASSERT_OK_AND_ASSIGN(e, BytePlaneEntropyBytes(same));
  EXPECT_EQ(e, 0.0);
}

TEST(StateSizeTest, EntropyCountsEachPlaneSeparately) {
  // 64 values alternating 1.0f and its successor: only plane 0 varies, 1 bit per value.
  std::vector<uint32_t> bits(64);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = 0x3F800000u + (i % 2);
  using PlaneBits = std::array<double, 4>;
  ASSERT_OK_AND_ASSIGN(PlaneBits h, BytePlaneEntropyBits(FloatBytes(bits)));
  EXPECT_DOUBLE_EQ(h[0], 1.0);
  EXPECT_EQ(h[1], 0.0);
  EXPECT_EQ(h[2], 0.0);
  EXPECT_EQ(h[3], 0.0);
  ASSERT_OK_AND_ASSIGN(double e, BytePlaneEntropyBytes(FloatBytes(bits)));
  EXPECT_DOUBLE_EQ(e, 64.0 / 8.0);
}

TEST(StateSizeTest, UniformPlanesCostTheRawSize) {
  // Values i * 0x01010101, i = 0..255: each plane is uniform over 256 symbols (8 bits).
  std::vector<uint32_t> bits(256);
  for (uint32_t i = 0; i < 256; ++i) bits[i] = i * 0x01010101u;
  ASSERT_OK_AND_ASSIGN(double e, BytePlaneEntropyBytes(FloatBytes(bits)));
  EXPECT_NEAR(e, 1024.0, 1e-9);
}

TEST(StateSizeTest, SkewedPlaneByHand) {
  // Plane 3 holds 0x00 three times and 0x01 once per 4 values: H = 0.811278... bits.
  std::vector<uint32_t> bits = {0, 0, 0, 0x01000000u, 0, 0, 0, 0x01000000u};
  ASSERT_OK_AND_ASSIGN(double e, BytePlaneEntropyBytes(FloatBytes(bits)));
  const double h = -(0.75 * std::log2(0.75) + 0.25 * std::log2(0.25));
  EXPECT_NEAR(e, 8 * h / 8.0, 1e-12);
}

TEST(StateSizeTest, RejectsPartialFloats) {
  const std::vector<uint8_t> seven(7);
  EXPECT_STATUS(BytePlaneEntropyBits(seven), kInvalidArgument);
  EXPECT_STATUS(BytePlaneEntropyBytes(seven), kInvalidArgument);
  EXPECT_STATUS(ShuffleBytePlanes(seven), kInvalidArgument);
}

TEST(StateSizeTest, ShuffleGroupsPlanes) {
  const std::vector<uint8_t> in = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> out, ShuffleBytePlanes(in));
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23}));
  ASSERT_OK_AND_ASSIGN(out, ShuffleBytePlanes({}));
  EXPECT_TRUE(out.empty());
}

TEST(StateSizeTest, ZstdSizesAndLevels) {
  const std::vector<uint8_t> zeros(4096, 0);
  ASSERT_OK_AND_ASSIGN(uint64_t n, ZstdCompressedBytes(zeros, 19));
  EXPECT_GT(n, 0u);
  EXPECT_LT(n, 64u);
  std::vector<uint8_t> noise(4096);
  uint32_t x = 12345;
  for (uint8_t& b : noise) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  ASSERT_OK_AND_ASSIGN(n, ZstdCompressedBytes(noise, 3));
  EXPECT_GE(n, 4096u);  // incompressible: stored, plus a frame header
  ASSERT_OK_AND_ASSIGN(n, ZstdCompressedBytes({}, 1));
  EXPECT_GT(n, 0u);
  EXPECT_STATUS(ZstdCompressedBytes(zeros, 0), kInvalidArgument);
  EXPECT_STATUS(ZstdCompressedBytes(zeros, 99), kInvalidArgument);
}

StateTensor F32Tensor(std::string name, const std::vector<uint32_t>& bits) {
  StateTensor t;
  t.name = std::move(name);
  t.dtype = DType::kF32;
  t.shape = {bits.size()};
  t.data = FloatBytes(bits);
  return t;
}

TEST(StateSizeTest, PartsGroupByNameSuffix) {
  RecurrentState s;
  // shift parts constant (0 bits); "mat" parts vary in plane 0 only, 1 bit per value.
  s.tensors.push_back(F32Tensor("layers.0.shift", std::vector<uint32_t>(8, 7)));
  s.tensors.push_back(F32Tensor("layers.0.mat", {0, 1, 0, 1}));
  s.tensors.push_back(F32Tensor("layers.1.shift", std::vector<uint32_t>(8, 7)));
  s.tensors.push_back(F32Tensor("layers.1.mat", {1, 0, 1, 0}));
  ASSERT_OK_AND_ASSIGN(std::vector<StatePartSize> rows, MeasureStateParts(s, 19));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].part, "shift");
  EXPECT_EQ(rows[0].tensors, 2u);
  EXPECT_EQ(rows[0].scalars, 16u);
  EXPECT_EQ(rows[0].raw_bytes, 64u);
  EXPECT_EQ(rows[0].byteplane_bytes, 0.0);
  EXPECT_EQ(rows[1].part, "mat");
  EXPECT_DOUBLE_EQ(rows[1].byteplane_bytes, 8 * 1.0 / 8);
  EXPECT_EQ(rows[2].part, "all");
  EXPECT_EQ(rows[2].tensors, 4u);
  EXPECT_EQ(rows[2].raw_bytes, 96u);
  EXPECT_DOUBLE_EQ(rows[2].byteplane_bytes, 1.0);  // sum of the parts
  ASSERT_OK_AND_ASSIGN(uint64_t z, ZstdCompressedBytes(FloatBytes({0, 1, 0, 1, 1, 0, 1, 0}), 19));
  EXPECT_EQ(rows[1].zstd_bytes, z);  // the part is its tensors concatenated in order
}

TEST(StateSizeTest, PartsRejectNonF32) {
  RecurrentState s;
  s.tensors.push_back(F32Tensor("a.b", {1, 2}));
  s.tensors[0].dtype = DType::kBF16;
  s.tensors[0].shape = {4};
  EXPECT_STATUS(MeasureStateParts(s, 3), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(std::vector<StatePartSize> rows, MeasureStateParts(RecurrentState{}, 3));
  ASSERT_EQ(rows.size(), 1u);  // just "all", empty
  EXPECT_EQ(rows[0].raw_bytes, 0u);
}

}  // namespace
}  // namespace kvstash::rwkv7
