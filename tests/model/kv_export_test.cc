// KvCache <-> KvChunk conversion: exact for f32, dtype rounding for bf16 / fp8.
#include "model/forward/kv_export.h"
#include "kvstash/dtype.h"
#include "tests/model/test_data.h"

namespace kvstash::model {
namespace {

KvCache MakeCache(uint32_t tokens) {
  KvCache c;
  c.n_layers = 2;
  c.n_kv_heads = 3;
  c.head_dim = 4;
  c.tokens = tokens;
  c.k.resize(2);
  c.v.resize(2);
  for (uint32_t l = 0; l < 2; ++l) {
    for (uint64_t i = 0; i < tokens * c.RowFloats(); ++i) {
      c.k[l].push_back(0.37f * static_cast<float>(i) - 5.1f * l);
      c.v[l].push_back(-0.013f * static_cast<float>(i * i % 97) + l);
    }
  }
  return c;
}

TEST(KvExport, F32RoundTripIsExactForEveryRange) {
  const KvCache c = MakeCache(5);
  for (uint32_t b = 0; b < 5; ++b) {
    for (uint32_t e = b + 1; e <= 5; ++e) {
      ASSERT_OK_AND_ASSIGN(KvChunk chunk, ToKvChunk(c, b, e, DType::kF32));
      ASSERT_OK(chunk.Validate());
      ASSERT_OK_AND_ASSIGN(KvCache back, FromKvChunk(chunk.view()));
      ASSERT_EQ(back.tokens, e - b);
      for (uint32_t l = 0; l < 2; ++l) {
        EXPECT_TRUE(std::equal(back.k[l].begin(), back.k[l].end(), c.k[l].begin() + b * 12));
        EXPECT_TRUE(std::equal(back.v[l].begin(), back.v[l].end(), c.v[l].begin() + b * 12));
      }
    }
  }
}

TEST(KvExport, Bf16AndFp8Values) {
  const KvCache c = MakeCache(3);
  ASSERT_OK_AND_ASSIGN(KvChunk bf, ToKvChunk(c, 0, 3, DType::kBF16));
  ASSERT_OK_AND_ASSIGN(KvCache bb, FromKvChunk(bf.view()));
  for (size_t i = 0; i < c.k[1].size(); ++i) EXPECT_EQ(bb.k[1][i], Bf16ToF32(F32ToBf16(c.k[1][i])));
  ASSERT_OK_AND_ASSIGN(KvChunk f8, ToKvChunk(c, 0, 3, DType::kFP8E4M3));
  ASSERT_EQ(f8.scales.size(), 4u);
  // Scale per (layer, K/V) is amax / 448.
  float amax = 0;
  for (float x : c.v[1]) amax = std::max(amax, std::abs(x));
  EXPECT_EQ(f8.scales[3], amax / 448.0f);
  ASSERT_OK_AND_ASSIGN(KvCache fb, FromKvChunk(f8.view()));
  for (size_t i = 0; i < c.v[1].size(); ++i) {
    EXPECT_EQ(fb.v[1][i], Fp8E4M3ToF32(F32ToFp8E4M3(c.v[1][i] / f8.scales[3])) * f8.scales[3]);
  }
  // Given scales are used as is.
  const float scales[4] = {1, 2, 3, 4};
  ASSERT_OK_AND_ASSIGN(KvChunk g, ToKvChunk(c, 0, 3, DType::kFP8E4M3, scales));
  EXPECT_EQ(g.scales, (std::vector<float>{1, 2, 3, 4}));
}

TEST(KvExport, Errors) {
  const KvCache c = MakeCache(3);
  EXPECT_STATUS(ToKvChunk(c, 1, 1, DType::kBF16), kInvalidArgument);
  EXPECT_STATUS(ToKvChunk(c, 0, 4, DType::kBF16), kInvalidArgument);
  EXPECT_STATUS(ToKvChunk(c, 0, 1, DType::kU8), kInvalidArgument);
  const float two[2] = {1, 1};
  EXPECT_STATUS(ToKvChunk(c, 0, 1, DType::kFP8E4M3, two), kInvalidArgument);
  KvCache other = MakeCache(1);
  other.head_dim = 8;
  KvCache dst = MakeCache(1);
  EXPECT_STATUS(AppendKv(other, &dst), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::model
