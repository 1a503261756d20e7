#include "common/checksum.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvstash {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(ChecksumTest, Crc32cCheckValue) {
  // CRC-32/ISCSI check value (RFC 3720; reveng catalogue).
  EXPECT_EQ(Crc32c(AsBytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c(AsBytes("")), 0u);
  // RFC 3720 B.4: 32 bytes of zeros -> 0x8A9136AA, 32 bytes of 0xFF -> 0x62A8AB43.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones), 0x62A8AB43u);
}

TEST(ChecksumTest, Crc32cContinues) {
  const std::string a = "1234", b = "56789";
  EXPECT_EQ(Crc32c(AsBytes(b), Crc32c(AsBytes(a))), 0xE3069283u);
}

// A bit-at-a-time CRC-32C (reflected poly 0x82F63B78): the independent reference for
// the interleaved SSE4.2 path on lengths around its 3 x 4096-byte stripe groups.
uint32_t BitwiseCrc32c(std::span<const uint8_t> data, uint32_t previous) {
  uint32_t c = previous ^ 0xFFFFFFFFu;
  for (uint8_t b : data) {
    c ^= b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

TEST(ChecksumTest, Crc32cMatchesBitwiseReferenceAcrossStripeSizes) {
  std::vector<uint8_t> data(3 * 3 * 4096 + 77);
  uint32_t x = 12345;
  for (auto& b : data) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 16);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{4095}, size_t{3 * 4096 - 1},
                   size_t{3 * 4096}, size_t{3 * 4096 + 1}, size_t{2 * 3 * 4096 + 13}, data.size()}) {
    const auto s = std::span<const uint8_t>(data).first(n);
    EXPECT_EQ(Crc32c(s), BitwiseCrc32c(s, 0)) << n;
    EXPECT_EQ(Crc32c(s, 0xDEADBEEFu), BitwiseCrc32c(s, 0xDEADBEEFu)) << n;
  }
  // Split anywhere, continued: the same as one call.
  const uint32_t whole = Crc32c(data);
  for (size_t cut : {size_t{5}, size_t{4096}, size_t{3 * 4096 + 3}, data.size() - 1}) {
    const auto s = std::span<const uint8_t>(data);
    EXPECT_EQ(Crc32c(s.subspan(cut), Crc32c(s.first(cut))), whole) << cut;
  }
}

TEST(ChecksumTest, Xxh3KnownValuesAndStreaming) {
  // XXH3_64bits("") with seed 0, from the xxHash reference (sanity_test vectors).
  EXPECT_EQ(Xxh3_64(std::string_view("")), 0x2D06800538D394C2ull);
  std::vector<uint8_t> data(10000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
  Xxh3Hasher h;
  h.Update(std::span(data).first(3));
  h.Update(std::span(data).subspan(3, 4000));
  h.Update(std::span(data).subspan(4003));
  EXPECT_EQ(h.Digest(), Xxh3_64(data));
  data[5000] ^= 1;
  EXPECT_NE(h.Digest(), Xxh3_64(data));
}

}  // namespace
}  // namespace kvstash
