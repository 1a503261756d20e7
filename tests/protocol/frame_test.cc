// Frame header layout (docs/protocol.md §2): hand-derived bytes and every rejection.
#include "protocol/frame.h"

#include <gtest/gtest.h>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "tests/support/test_util.h"

namespace kvstash::protocol {
namespace {

using HeaderBytes = std::array<uint8_t, kFrameHeaderBytes>;

HeaderBytes Encode(const FrameHeader& h) {
  HeaderBytes b{};
  EncodeFrameHeader(h, b.data());
  return b;
}

TEST(FrameTest, HeaderBytesMatchTheDocumentedLayout) {
  FrameHeader h;
  h.opcode = static_cast<uint8_t>(Opcode::kGet);
  h.flags = 0x0102;
  h.request_id = 0x1122334455667788ull;
  h.body_bytes = 0x00ABCDEF;
  h.body_crc32c = 0xDEADBEEF;
  h.status = 0;
  const HeaderBytes b = Encode(h);
  const uint8_t want[28] = {'K', 'V', 'S', 'F', 1, 0x04, 0x02, 0x01,
                            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
                            0xEF, 0xCD, 0xAB, 0x00, 0xEF, 0xBE, 0xAD, 0xDE,
                            0, 0, 0, 0};
  for (int i = 0; i < 28; ++i) EXPECT_EQ(b[i], want[i]) << "byte " << i;
  const uint32_t crc = Crc32c(std::span<const uint8_t>(want, 28));
  EXPECT_EQ(LoadLe<uint32_t>(b.data() + 28), crc);
}

TEST(FrameTest, HeaderRoundTrips) {
  for (uint8_t op = 1; op <= kNumOpcodes; ++op) {
    for (uint8_t reply : {0, 1}) {
      FrameHeader h;
      h.opcode = static_cast<uint8_t>(op | (reply ? kReplyBit : 0));
      h.flags = static_cast<uint16_t>(op * 3);
      h.request_id = 1000ull * op + reply;
      h.body_bytes = op * 7u;
      h.body_crc32c = 0x01020304u * op;
      h.status = reply ? 3 : 0;
      const HeaderBytes b = Encode(h);
      ASSERT_OK_AND_ASSIGN(FrameHeader back, DecodeFrameHeader(b));
      EXPECT_EQ(back, h);
      EXPECT_EQ(back.is_reply(), reply == 1);
    }
  }
}

TEST(FrameTest, EveryFlippedBitIsCaught) {
  FrameHeader h;
  h.opcode = static_cast<uint8_t>(Opcode::kLookup);
  h.request_id = 42;
  const HeaderBytes good = Encode(h);
  for (size_t bit = 0; bit < kFrameHeaderBytes * 8; ++bit) {
    HeaderBytes bad = good;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(DecodeFrameHeader(bad).ok()) << "bit " << bit;
  }
}

TEST(FrameTest, RejectsOtherVersionWithNotSupported) {
  FrameHeader h;
  h.version = 2;
  h.opcode = 1;
  EXPECT_STATUS(DecodeFrameHeader(Encode(h)), kNotSupported);
}

TEST(FrameTest, RejectsWrongMagicAndReservedBytes) {
  HeaderBytes b = Encode(FrameHeader{.opcode = 1});
  b[0] = 'X';
  StoreLe<uint32_t>(b.data() + 28, Crc32c(std::span<const uint8_t>(b.data(), 28)));
  EXPECT_STATUS(DecodeFrameHeader(b), kCorruption);
  b = Encode(FrameHeader{.opcode = 1});
  b[26] = 1;
  StoreLe<uint32_t>(b.data() + 28, Crc32c(std::span<const uint8_t>(b.data(), 28)));
  EXPECT_STATUS(DecodeFrameHeader(b), kCorruption);
}

TEST(FrameTest, AppendFrameFillsSizeAndCrc) {
  const std::vector<uint8_t> body = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  std::vector<uint8_t> out = {0xAA};  // appends after existing bytes
  AppendFrame(FrameHeader{.opcode = 8, .request_id = 7}, body, &out);
  ASSERT_EQ(out.size(), 1 + kFrameHeaderBytes + body.size());
  ASSERT_OK_AND_ASSIGN(FrameHeader h, DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(
                                          out.data() + 1, kFrameHeaderBytes)));
  EXPECT_EQ(h.body_bytes, 9u);
  EXPECT_EQ(h.body_crc32c, 0xE3069283u);  // CRC32C check value of "123456789"
  EXPECT_EQ(h.request_id, 7u);
}

TEST(FrameTest, ErrorReplyCarriesStatusAndMessage) {
  std::vector<uint8_t> out;
  AppendErrorReply(static_cast<uint8_t>(Opcode::kPut), 99, Status::NotFound("no such chunk"),
                   &out);
  ASSERT_OK_AND_ASSIGN(FrameHeader h, DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(
                                          out.data(), kFrameHeaderBytes)));
  EXPECT_EQ(h.opcode, 0x83);
  EXPECT_EQ(h.request_id, 99u);
  EXPECT_EQ(h.status, static_cast<uint8_t>(Status::Code::kNotFound));
  EXPECT_EQ(std::string(out.begin() + kFrameHeaderBytes, out.end()), "no such chunk");
}

TEST(FrameTest, OpcodeNames) {
  EXPECT_EQ(OpcodeName(0x02), "LOOKUP");
  EXPECT_EQ(OpcodeName(0x82), "LOOKUP");
  EXPECT_EQ(OpcodeName(0x09), "UNKNOWN");
  EXPECT_FALSE(IsRequestOpcode(0));
  EXPECT_TRUE(IsRequestOpcode(8));
  EXPECT_FALSE(IsRequestOpcode(9));
  EXPECT_FALSE(IsRequestOpcode(0x81));
}

}  // namespace
}  // namespace kvstash::protocol

namespace kvstash::protocol {
namespace {

// Bitwise CRC-32C (RFC 3720 §B.4), the slowest correct definition, to check the
// accelerated Crc32c that frames use across sizes and split points.
uint32_t BitwiseCrc32c(std::span<const uint8_t> d) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : d) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

TEST(FrameTest, Crc32cMatchesTheBitwiseDefinition) {
  std::vector<uint8_t> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 999, 1000}) {
    std::span<const uint8_t> s(b.data(), n);
    EXPECT_EQ(Crc32c(s), BitwiseCrc32c(s)) << n;
    for (size_t split : {size_t{0}, n / 3, n}) {
      EXPECT_EQ(Crc32c(s.subspan(split), Crc32c(s.first(split))), BitwiseCrc32c(s)) << n;
    }
  }
}

}  // namespace
}  // namespace kvstash::protocol
