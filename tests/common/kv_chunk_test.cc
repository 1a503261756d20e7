#include "kvstash/kv_chunk.h"

#include <gtest/gtest.h>

#include "common/checksum.h"
#include "tests/support/test_util.h"

namespace kvstash {
namespace {

KvLayout Smol(DType t = DType::kBF16) { return {30, 3, 64, t}; }

TEST(KvChunkTest, SizesOfSmolLm2Chunk) {
  const KvLayout l = Smol();
  EXPECT_EQ(l.ScalarsPerToken(), 2u * 30 * 3 * 64);
  EXPECT_EQ(l.DataBytes(256), 256u * 11520 * 2);  // 5,898,240 bytes per 256-token chunk
  EXPECT_EQ(l.NumScales(), 0u);
  EXPECT_EQ(Smol(DType::kFP8E4M3).NumScales(), 60u);
}

TEST(KvChunkTest, ValidateRejectsBadShapes) {
  EXPECT_OK(Smol().Validate());
  EXPECT_STATUS((KvLayout{0, 3, 64, DType::kBF16}.Validate()), kInvalidArgument);
  EXPECT_STATUS((KvLayout{30, 3, 5000, DType::kBF16}.Validate()), kInvalidArgument);
  EXPECT_STATUS((KvLayout{30, 3, 64, DType::kU8}.Validate()), kInvalidArgument);
  KvChunk c = KvChunk::Zeros(Smol(), 4);
  EXPECT_OK(c.Validate());
  c.data.pop_back();
  EXPECT_STATUS(c.Validate(), kInvalidArgument);
  KvChunk f = KvChunk::Zeros(Smol(DType::kFP8E4M3), 4);
  EXPECT_OK(f.Validate());
  f.scales.pop_back();
  EXPECT_STATUS(f.Validate(), kInvalidArgument);
  KvChunk empty = KvChunk::Zeros(Smol(), 1);
  empty.tokens = 0;
  empty.data.clear();
  EXPECT_STATUS(empty.Validate(), kInvalidArgument);
}

TEST(KvChunkTest, KAndVAddressCanonicalLayout) {
  const KvLayout l{2, 1, 2, DType::kFP8E4M3};
  KvChunk c = KvChunk::Zeros(l, 3);  // each tensor is 3*1*2 = 6 bytes
  ASSERT_EQ(c.data.size(), 24u);
  for (size_t i = 0; i < c.data.size(); ++i) c.data[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(c.view().K(0)[0], 0);
  EXPECT_EQ(c.view().V(0)[0], 6);
  EXPECT_EQ(c.view().K(1)[0], 12);
  EXPECT_EQ(c.view().V(1)[5], 23);
  c.MutableV(1)[5] = 99;
  EXPECT_EQ(c.data[23], 99);
}

TEST(KvChunkTest, ContentChecksumCoversDataAndScales) {
  KvChunk c = KvChunk::Zeros(KvLayout{1, 1, 4, DType::kFP8E4M3}, 2);
  const uint64_t base = c.ContentChecksum();
  // Data followed by scales as LE fp32: 16 zero bytes then 1.0f, 1.0f.
  std::vector<uint8_t> expect(16, 0);
  for (int i = 0; i < 2; ++i) {
    for (uint8_t b : {0x00, 0x00, 0x80, 0x3F}) expect.push_back(b);
  }
  EXPECT_EQ(base, Xxh3_64(expect));
  c.scales[1] = 2.0f;
  EXPECT_NE(c.ContentChecksum(), base);
}

TEST(KvChunkTest, StateValidation) {
  RecurrentState s;
  s.tensors.push_back({"layer0.ssm", DType::kF32, {2, 3}, std::vector<uint8_t>(24)});
  EXPECT_OK(s.Validate());
  EXPECT_EQ(s.DataBytes(), 24u);
  s.tensors.push_back(s.tensors[0]);
  EXPECT_STATUS(s.Validate(), kInvalidArgument);  // duplicate name
  s.tensors[1].name = "layer0.conv";
  s.tensors[1].data.pop_back();
  EXPECT_STATUS(s.Validate(), kInvalidArgument);  // size mismatch
  StateTensor t{"", DType::kF32, {1}, std::vector<uint8_t>(4)};
  EXPECT_STATUS(t.Validate(), kInvalidArgument);
  t = {"x", DType::kF32, {}, {}};
  EXPECT_STATUS(t.Validate(), kInvalidArgument);
  t = {"x", DType::kF32, {1ull << 41}, {}};
  EXPECT_STATUS(t.Validate(), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash
