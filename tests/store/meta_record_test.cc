#include "store/meta_record.h"

#include <gtest/gtest.h>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "tests/support/test_util.h"

namespace kvstash::store {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

MetaRecord Sample() {
  MetaRecord m;
  m.flags = kMetaHasState | kMetaHasParent | kMetaPinned;
  m.codec = 2;
  m.tiers = kMetaInT1 | kMetaInT2;
  m.tokens = 256;
  for (int i = 0; i < 16; ++i) m.parent[i] = static_cast<uint8_t>(i * 17);
  m.payload_bytes = 2'400'000;
  m.payload_checksum = 0x0123456789abcdefull;
  m.state_bytes = 4096;
  m.state_checksum = 0xfedcba9876543210ull;
  m.created_ms = 1'764'400'000'000ull;
  m.last_access_ms = 1'764'400'123'456ull;
  m.hits = 77;
  return m;
}

TEST(MetaRecord, RoundTripAndLayout) {
  const MetaRecord m = Sample();
  const std::string bytes = EncodeMetaRecord(m);
  ASSERT_EQ(bytes.size(), kMetaRecordBytes);
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  // Field offsets of docs/format/store.md.
  EXPECT_EQ(LoadLe<uint32_t>(p + 0), kMetaMagic);
  EXPECT_EQ(LoadLe<uint16_t>(p + 4), kMetaVersion);
  EXPECT_EQ(LoadLe<uint16_t>(p + 6), m.flags);
  EXPECT_EQ(LoadLe<uint16_t>(p + 8), m.codec);
  EXPECT_EQ(p[10], m.tiers);
  EXPECT_EQ(LoadLe<uint32_t>(p + 12), 256u);
  EXPECT_EQ(p[16 + 3], 51);
  EXPECT_EQ(LoadLe<uint64_t>(p + 32), m.payload_bytes);
  EXPECT_EQ(LoadLe<uint64_t>(p + 40), m.payload_checksum);
  EXPECT_EQ(LoadLe<uint64_t>(p + 48), m.state_bytes);
  EXPECT_EQ(LoadLe<uint64_t>(p + 56), m.state_checksum);
  EXPECT_EQ(LoadLe<uint64_t>(p + 64), m.created_ms);
  EXPECT_EQ(LoadLe<uint64_t>(p + 72), m.last_access_ms);
  EXPECT_EQ(LoadLe<uint32_t>(p + 80), 77u);
  EXPECT_EQ(LoadLe<uint32_t>(p + 84), Crc32c(std::span(p, 84)));
  ASSERT_OK_AND_ASSIGN(MetaRecord back, DecodeMetaRecord(AsBytes(bytes)));
  EXPECT_EQ(back, m);
}

TEST(MetaRecord, EveryFlippedBitIsRefused) {
  const std::string good = EncodeMetaRecord(Sample());
  for (size_t i = 0; i < good.size(); ++i) {
    for (int b = 0; b < 8; ++b) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << b));
      EXPECT_FALSE(DecodeMetaRecord(AsBytes(bad)).ok()) << "byte " << i << " bit " << b;
    }
  }
}

TEST(MetaRecord, SizesAndVersion) {
  const std::string good = EncodeMetaRecord(Sample());
  for (size_t n : {size_t{0}, size_t{1}, kMetaRecordBytes - 1}) {
    EXPECT_STATUS(DecodeMetaRecord(AsBytes(good.substr(0, n))), kCorruption);
  }
  EXPECT_STATUS(DecodeMetaRecord(AsBytes(good + "x")), kCorruption);
  // A future version with a valid CRC is a Mismatch, not Corruption.
  std::string v2 = good;
  auto* p = reinterpret_cast<uint8_t*>(v2.data());
  StoreLe<uint16_t>(p + 4, 2);
  StoreLe<uint32_t>(p + 84, Crc32c(std::span<const uint8_t>(p, 84)));
  EXPECT_STATUS(DecodeMetaRecord(AsBytes(v2)), kMismatch);
  // State flag and size must agree.
  MetaRecord m = Sample();
  m.state_bytes = 0;
  EXPECT_STATUS(DecodeMetaRecord(AsBytes(EncodeMetaRecord(m))), kCorruption);
  m = Sample();
  m.tokens = 0;
  EXPECT_STATUS(DecodeMetaRecord(AsBytes(EncodeMetaRecord(m))), kCorruption);
}

}  // namespace
}  // namespace kvstash::store
