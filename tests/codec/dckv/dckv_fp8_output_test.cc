// The fp8 output of the dckv decoder (dckv_fp8_output.h): hand-derived e4m3 codes
// (exact values, saturation at 448, subnormals, signed zero), the scale rule (given,
// or amax / 448 per (layer, K/V)), agreement with the common dtype conversions, and
// DckvCodec::DecodeFp8 on real payloads (checksum still verified).
#include "codec/dckv/dckv_fp8_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "common/byte_io.h"
#include "kvstash/dtype.h"
#include "model/forward/kv_export.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

// 1 layer, 1 head, head_dim 4, 2 tokens: K = k[8], V = v[8] (bf16-exact values).
KvChunk HandChunk(const float (&k)[8], const float (&v)[8]) {
  KvChunk c = KvChunk::Zeros({1, 1, 4, DType::kBF16}, 2);
  for (int kv = 0; kv < 2; ++kv) {
    const float* src = kv == 0 ? k : v;
    auto dst = kv == 0 ? c.MutableK(0) : c.MutableV(0);
    for (int i = 0; i < 8; ++i) {
      const uint16_t b = F32ToBf16(src[i]);
      dst[2 * i] = static_cast<uint8_t>(b);
      dst[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
  }
  return c;
}

const float kK[8] = {1.0f, -2.5f, 448.0f, 500.0f, 0.001953125f, -0.0f, 3.0f, 0.25f};
const float kV[8] = {896.0f, -1.0f, 0.5f, 7.0f, 0.0f, -896.0f, 64.0f, 0.015625f};

// e4m3 codes by hand: sign | (exponent + 7) << 3 | mantissa / 8.
TEST(DckvFp8Output, HandDerivedCodesWithGivenScales) {
  const KvChunk c = HandChunk(kK, kV);
  const float scales[2] = {1.0f, 2.0f};
  ASSERT_OK_AND_ASSIGN(auto out, Bf16ChunkToFp8(c.view(), scales));
  EXPECT_EQ(out.layout.dtype, DType::kFP8E4M3);
  EXPECT_EQ(out.scales, (std::vector<float>{1.0f, 2.0f}));
  ASSERT_OK(out.Validate());
  // K, scale 1: 1.0 = 2^0 -> 0x38; -2.5 = -1.25 * 2 -> 0x80 | 8 << 3 | 2 = 0xC2; 448 =
  // 1.75 * 2^8 -> 0x7E (max); 500 saturates to 0x7E; 2^-9 = the smallest subnormal
  // 0x01; -0 -> 0x80; 3 = 1.5 * 2 -> 0x44; 0.25 = 2^-2 -> 0x28.
  const std::vector<uint8_t> want_k = {0x38, 0xC2, 0x7E, 0x7E, 0x01, 0x80, 0x44, 0x28};
  // V, scale 2 (values halved): 448 -> 0x7E; -0.5 -> 0xB0; 0.25 -> 0x28; 3.5 = 1.75 * 2
  // -> 0x46; 0 -> 0x00; -448 -> 0xFE; 32 = 2^5 -> 0x60; 2^-7 is below the smallest
  // normal 2^-6: subnormal 4 * 2^-9 -> 0x04.
  const std::vector<uint8_t> want_v = {0x7E, 0xB0, 0x28, 0x46, 0x00, 0xFE, 0x60, 0x04};
  EXPECT_EQ(std::vector<uint8_t>(out.view().K(0).begin(), out.view().K(0).end()), want_k);
  EXPECT_EQ(std::vector<uint8_t>(out.view().V(0).begin(), out.view().V(0).end()), want_v);
}

// Empty scales: amax / 448 per tensor (K: 500 / 448, V: 896 / 448 = 2).
TEST(DckvFp8Output, DynamicScaleIsAmaxOver448) {
  const KvChunk c = HandChunk(kK, kV);
  ASSERT_OK_AND_ASSIGN(auto out, Bf16ChunkToFp8(c.view()));
  EXPECT_EQ(out.scales[0], 500.0f / 448.0f);
  EXPECT_EQ(out.scales[1], 2.0f);
  EXPECT_EQ(out.view().K(0)[3], 0x7E);  // the largest |K| maps to 448
  EXPECT_EQ(out.view().V(0)[0], 0x7E);
  EXPECT_EQ(out.view().V(0)[5], 0xFE);
  // An all-zero tensor gets scale 1.
  const float zeros[8] = {};
  ASSERT_OK_AND_ASSIGN(auto z, Bf16ChunkToFp8(HandChunk(zeros, kV).view()));
  EXPECT_EQ(z.scales[0], 1.0f);
}

TEST(DckvFp8Output, BadInputIsInvalidArgument) {
  const KvChunk c = HandChunk(kK, kV);
  const float one[1] = {1.0f};
  EXPECT_STATUS(Bf16ChunkToFp8(c.view(), one), kInvalidArgument);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    const float s[2] = {1.0f, bad};
    EXPECT_STATUS(Bf16ChunkToFp8(c.view(), s), kInvalidArgument) << bad;
  }
  KvChunk f32 = KvChunk::Zeros({1, 1, 4, DType::kF32}, 2);
  EXPECT_STATUS(Bf16ChunkToFp8(f32.view()), kInvalidArgument);
}

DckvCodec MakeCodec() {
  auto rows = testing::MakeRows(800, 0);
  auto basis = FitDckvBasis(rows, 2);
  EXPECT_TRUE(basis.ok());
  DckvRateOptions o;
  o.target_ratio = 8.0;
  o.raw_head = 2;
  o.raw_tail = 3;
  auto a = MakeDckvArtifact(*basis, o);
  EXPECT_TRUE(a.ok());
  auto c = DckvCodec::Create(std::move(*a));
  EXPECT_TRUE(c.ok());
  return std::move(*c);
}

// DecodeFp8 = Decode, then per tensor QuantizeFp8E4M3(ConvertBf16ToF32(values), scale)
// (the common conversions), for dynamic and fixed scales; model::FromKvChunk of the fp8
// chunk gives back the bf16 values within half an fp8 step (relative 2^-4 for
// normals, 2^-10 * scale absolute in the subnormal range).
TEST(DckvFp8Output, DecodeFp8MatchesCommonConversions) {
  const auto codec = MakeCodec();
  const Digest256 model = {4};
  const auto eval = testing::MakeRows(60, 1);
  const auto chunk = testing::MakeChunk(eval, 0, 37, DType::kF32);
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, 60, model));
  ASSERT_OK_AND_ASSIGN(auto bf16, codec.Decode(payload, model));
  std::vector<float> fixed(2 * testing::kLayers);
  for (size_t i = 0; i < fixed.size(); ++i) fixed[i] = 0.01f * static_cast<float>(i + 1);
  for (bool dynamic : {true, false}) {
    ASSERT_OK_AND_ASSIGN(auto fp8,
                         dynamic ? codec.DecodeFp8(payload, model) : codec.DecodeFp8(payload, model, fixed));
    ASSERT_OK(fp8.Validate());
    ASSERT_OK_AND_ASSIGN(auto back, model::FromKvChunk(fp8.view()));
    const uint64_t n = bf16.layout.ScalarsPerTensor(bf16.tokens);
    for (uint32_t l = 0; l < testing::kLayers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const auto src = kv == 0 ? bf16.view().K(l) : bf16.view().V(l);
        std::vector<uint16_t> b(n);
        std::vector<float> v(n);
        for (uint64_t i = 0; i < n; ++i) b[i] = LoadLe<uint16_t>(src.data() + 2 * i);
        ASSERT_OK(ConvertBf16ToF32(b, v));
        const float scale = dynamic ? ComputeFp8Scale(v) : fixed[2 * l + kv];
        EXPECT_EQ(fp8.scales[2 * l + kv], scale);
        std::vector<uint8_t> q(n);
        ASSERT_OK(QuantizeFp8E4M3(v, scale, q));
        const auto got = kv == 0 ? fp8.view().K(l) : fp8.view().V(l);
        EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.end()), q);
        const auto& restored = kv == 0 ? back.k[l] : back.v[l];
        for (uint64_t i = 0; i < n; ++i) {
          const double x = std::min<double>(std::abs(v[i]), 448.0 * scale);  // saturation (fixed scales)
          const double err = std::abs(std::abs(double(restored[i])) - x);
          EXPECT_LE(err, x * 0.0625 + std::ldexp(double(scale), -10) * 1.0001) << l << " " << kv << " " << i;
        }
      }
    }
  }
  // The checksum is still verified: a flipped body byte is Corruption, not fp8 output.
  auto bad = payload;
  bad.back() ^= 0x40;
  EXPECT_FALSE(codec.DecodeFp8(bad, model).ok());
  const float one[1] = {1.0f};
  EXPECT_STATUS(codec.DecodeFp8(payload, model, one), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::dckv
