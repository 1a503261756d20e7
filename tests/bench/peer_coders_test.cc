// The general-purpose peers of `kvstash-bench codec --codec lossless-peers`
// (benchmarks/drivers/peer_coders.h) on real model values: the first 32,768 bf16
// values of SmolLM2-135M's token embedding (benchmarks/data/smollm2_token_embd_bf16.bin),
// as bf16, as f16 and as fp8 e4m3 (scale amax / 448), must round-trip byte for byte and
// come out smaller than their input; damaged streams must fail, not decode.
#include "benchmarks/drivers/peer_coders.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

#include "codec/baselines/byte_plane.h"
#include "kvstash/dtype.h"
#include "kvstash/dtype_bits.h"
#include "tests/support/test_util.h"

namespace kvstash::bench {
namespace {

constexpr size_t kValues = 32768;

// dtype name -> (element bytes, little-endian elements).
std::map<std::string, std::pair<size_t, std::vector<uint8_t>>> RealInputs() {
  std::ifstream f(testing::SourceDir() + "/benchmarks/data/smollm2_token_embd_bf16.bin", std::ios::binary);
  std::vector<uint8_t> bf16((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bf16.resize(std::min(bf16.size(), 2 * kValues));
  std::vector<float> x(bf16.size() / 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = Bf16ToF32(static_cast<uint16_t>(bf16[2 * i] | bf16[2 * i + 1] << 8));
  const float scale = ComputeFp8Scale(x);
  std::vector<uint8_t> f16, fp8;
  for (float v : x) {
    const uint16_t h = F32ToF16(v);
    f16.push_back(static_cast<uint8_t>(h));
    f16.push_back(static_cast<uint8_t>(h >> 8));
    fp8.push_back(F32ToFp8E4M3(v / scale));
  }
  return {{"bf16", {2, bf16}}, {"f16", {2, f16}}, {"fp8", {1, fp8}}};
}

TEST(PeerCodersTest, InputIsTheRealSample) {
  const auto inputs = RealInputs();
  ASSERT_EQ(inputs.at("bf16").second.size(), 2 * kValues);
  ASSERT_EQ(inputs.at("fp8").second.size(), kValues);
  // Not a constant stream: many distinct values.
  const auto& b = inputs.at("bf16").second;
  std::vector<uint16_t> v;
  for (size_t i = 0; i < b.size(); i += 2) v.push_back(static_cast<uint16_t>(b[i] | b[i + 1] << 8));
  std::sort(v.begin(), v.end());
  EXPECT_GT(std::unique(v.begin(), v.end()) - v.begin(), 1000);
}

TEST(PeerCodersTest, TheBuildHasTheseCoders) {
  std::vector<std::string> names;
  for (const PeerCoder& c : PeerCoders()) names.push_back(c.name);
  std::vector<std::string> want = {"zstd-3", "zstd-19"};
#if defined(KVSTASH_HAVE_HTSCODECS)
  want.push_back("htscodecs-o0");
  want.push_back("htscodecs-o1");
#endif
  EXPECT_EQ(names, want);
}

TEST(PeerCodersTest, RoundTripRealValuesExactlyAndSmaller) {
  for (const auto& [dtype, input] : RealInputs()) {
    const auto& [width, data] = input;
    for (const PeerCoder& c : PeerCoders()) {
      SCOPED_TRACE(c.name + " on " + dtype);
      ASSERT_OK_AND_ASSIGN(auto packed, c.encode(data, width));
      EXPECT_LT(packed.size(), data.size());
      std::vector<uint8_t> back(data.size(), 0xA5);
      ASSERT_OK(c.decode(packed, width, back));
      EXPECT_EQ(back, data);
    }
  }
}

TEST(PeerCodersTest, DamagedStreamsFail) {
  const auto inputs = RealInputs();
  const auto& [width, data] = inputs.at("bf16");
  for (const PeerCoder& c : PeerCoders()) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(auto packed, c.encode(data, width));
    std::vector<uint8_t> back(data.size());
    packed.pop_back();
    EXPECT_STATUS(c.decode(packed, width, back), kCorruption);
    // The right stream for a different size never passes as the original.
    ASSERT_OK_AND_ASSIGN(auto whole, c.encode(data, width));
    std::vector<uint8_t> shorter(data.size() - 2 * width);
    EXPECT_STATUS(c.decode(whole, width, shorter), kCorruption);
  }
}

TEST(PeerCodersTest, BytePlanesSplitAndMerge) {
  const std::vector<uint8_t> data = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06};
  EXPECT_EQ(baselines::SplitBytePlanes(data, 2), (std::vector<uint8_t>{0x01, 0x03, 0x05, 0x02, 0x04, 0x06}));
  EXPECT_EQ(baselines::SplitBytePlanes(data, 1), data);
  std::vector<uint8_t> back(data.size());
  baselines::MergeBytePlanes(baselines::SplitBytePlanes(data, 2), 2, back);
  EXPECT_EQ(back, data);
}

}  // namespace
}  // namespace kvstash::bench
