// GPU dtype conversions vs the CPU reference, bit for bit, over every bf16 and fp8
// pattern and a sweep of fp32 inputs (specials, subnormals, ties, random bits).
#include "gpu_kernels/dtype_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <limits>
#include <random>

#include "kvstash/dtype.h"
#include "tests/gpu_kernels/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::gpu {
namespace {

using testing::DeviceBuffer;

std::vector<float> SweepInputs() {
  std::vector<float> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t hi = b << 16;
    v.push_back(std::bit_cast<float>(hi));
    v.push_back(std::bit_cast<float>(hi | 0x8000u));  // bf16 ties
    v.push_back(std::bit_cast<float>(hi | 0x8001u));
    v.push_back(std::bit_cast<float>(hi | 0x7FFFu));
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 1 << 18; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  return v;
}

std::vector<uint32_t> Bits(const std::vector<float>& f) {
  std::vector<uint32_t> u(f.size());
  for (size_t i = 0; i < f.size(); ++i) u[i] = std::bit_cast<uint32_t>(f[i]);
  return u;
}

TEST(GpuDtypeTest, Bf16ToF32AllPatterns) {
  KVSTASH_SKIP_WITHOUT_GPU();
  std::vector<uint16_t> in(65536);
  for (uint32_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<float> expect(in.size());
  ASSERT_OK(ConvertBf16ToF32(in, expect));
  DeviceBuffer<uint16_t> d_in(in);
  DeviceBuffer<float> d_out(in.size());
  ASSERT_OK(Bf16ToF32Device(d_in.get(), d_out.get(), in.size(), nullptr));
  EXPECT_EQ(Bits(d_out.ToHost()), Bits(expect));
}

TEST(GpuDtypeTest, F32ToBf16Sweep) {
  KVSTASH_SKIP_WITHOUT_GPU();
  const std::vector<float> in = SweepInputs();
  std::vector<uint16_t> expect(in.size());
  ASSERT_OK(ConvertF32ToBf16(in, expect));
  DeviceBuffer<float> d_in(in);
  DeviceBuffer<uint16_t> d_out(in.size());
  ASSERT_OK(F32ToBf16Device(d_in.get(), d_out.get(), in.size(), nullptr));
  EXPECT_EQ(d_out.ToHost(), expect);
}

TEST(GpuDtypeTest, Fp8BothDirectionsWithScales) {
  KVSTASH_SKIP_WITHOUT_GPU();
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(i);
  const std::vector<float> sweep = SweepInputs();
  for (float scale : {1.0f, 0.0123f, 3.5f, 1e-30f}) {
    std::vector<float> expect_f(all.size());
    ASSERT_OK(DequantizeFp8E4M3(all, scale, expect_f));
    DeviceBuffer<uint8_t> d_q(all);
    DeviceBuffer<float> d_f(all.size());
    ASSERT_OK(Fp8E4M3ToF32Device(d_q.get(), scale, d_f.get(), all.size(), nullptr));
    EXPECT_EQ(Bits(d_f.ToHost()), Bits(expect_f)) << "scale " << scale;

    std::vector<uint8_t> expect_q(sweep.size());
    ASSERT_OK(QuantizeFp8E4M3(sweep, scale, expect_q));
    DeviceBuffer<float> d_in(sweep);
    DeviceBuffer<uint8_t> d_out(sweep.size());
    ASSERT_OK(F32ToFp8E4M3Device(d_in.get(), scale, d_out.get(), sweep.size(), nullptr));
    EXPECT_EQ(d_out.ToHost(), expect_q) << "scale " << scale;
  }
}

TEST(GpuDtypeTest, RejectsBadScaleWithoutLaunching) {
  // Argument checking happens on the host, so it is testable without a device.
  EXPECT_STATUS(F32ToFp8E4M3Device(nullptr, 0.0f, nullptr, 10, nullptr), kInvalidArgument);
  EXPECT_STATUS(Fp8E4M3ToF32Device(nullptr, std::numeric_limits<float>::infinity(), nullptr,
                                   10, nullptr),
                kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::gpu
