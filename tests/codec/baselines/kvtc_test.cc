#include "codec/baselines/kvtc.h"

#include <gtest/gtest.h>

#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::baselines {
namespace {

constexpr Digest256 kModel = {4, 5, 6};

TEST(Kvtc, BitBudgetIsRespectedAndErrorFallsWithRate) {
  const auto rows = dckv::testing::MakeRows(800, 0);
  ASSERT_OK_AND_ASSIGN(auto basis, dckv::FitDckvBasis(rows, 2));
  const auto eval = dckv::testing::MakeRows(61, 1);
  const auto chunk = dckv::testing::MakeChunk(eval, 0, 61, DType::kF32);
  const auto in = dckv::testing::ChunkValues(chunk);
  const uint64_t bf16_bits =
      16ull * 2 * dckv::testing::kLayers * dckv::testing::kHeads * dckv::testing::kHeadDim;
  double prev = 1e30;
  for (double ratio : {32.0, 8.0, 3.0}) {
    ASSERT_OK_AND_ASSIGN(auto codec, KvtcCodec::Create(basis, ratio, 10000.0f, 1, 2));
    EXPECT_LE(codec.BitsPerToken(), static_cast<uint64_t>(bf16_bits / ratio));
    EXPECT_GE(codec.BitsPerToken() + 1, static_cast<uint64_t>(bf16_bits / ratio));  // budget used
    ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, 61, kModel));
    ASSERT_OK_AND_ASSIGN(auto out, codec.Decode(payload, kModel));
    const auto got = dckv::testing::ChunkValues(out);
    double mse = 0;
    for (size_t i = 0; i < in.size(); ++i) mse += (double(in[i]) - got[i]) * (double(in[i]) - got[i]);
    mse /= in.size();
    EXPECT_LT(mse, prev) << ratio;
    prev = mse;
    auto bad = payload;
    bad[bad.size() / 2] ^= 1;
    EXPECT_STATUS(codec.Decode(bad, kModel), kCorruption);
    EXPECT_STATUS(codec.Decode(payload, Digest256{}), kMismatch);
  }
}

}  // namespace
}  // namespace kvstash::baselines
