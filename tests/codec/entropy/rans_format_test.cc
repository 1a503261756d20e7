// Byte-exact checks of the stream layout against values derived by hand from
// docs/format/rans.md.
#include <gtest/gtest.h>

#include <vector>

#include "codec/entropy/rans.h"
#include "codec/entropy/rans_format.h"
#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

uint32_t HeaderState(const std::vector<uint8_t>& s, int lane) {
  return s[4 * lane] | s[4 * lane + 1] << 8 | s[4 * lane + 2] << 16 |
         static_cast<uint32_t>(s[4 * lane + 3]) << 24;
}

TEST(RansFormat, EmptyStreamIsThe32InitialStates) {
  ASSERT_OK_AND_ASSIGN(auto t, FrequencyTable::Create(10, 1, 0, {768, 256}, 0));
  ASSERT_OK_AND_ASSIGN(auto tables, TableSet::Create({t}));
  ASSERT_OK_AND_ASSIGN(auto stream, RansEncode(std::vector<uint16_t>{}, {}, tables));
  ASSERT_EQ(stream.size(), 128u);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(HeaderState(stream, j), 65536u);
  std::vector<uint16_t> out;
  EXPECT_OK(RansDecode(stream, {}, tables, std::span<uint16_t>(out)));
}

TEST(RansFormat, OneDirectSymbol) {
  // Symbol 1 (freq 256, cum 768, P = 10) on lane 0 from x = 2^16:
  // x' = (65536 / 256) << 10 + 65536 % 256 + 768 = 262912; no renormalisation.
  ASSERT_OK_AND_ASSIGN(auto t, FrequencyTable::Create(10, 1, 0, {768, 256}, 0));
  ASSERT_OK_AND_ASSIGN(auto tables, TableSet::Create({t}));
  ASSERT_OK_AND_ASSIGN(auto stream, RansEncode(std::vector<uint16_t>{1}, {}, tables));
  ASSERT_EQ(stream.size(), 128u);
  EXPECT_EQ(HeaderState(stream, 0), 262912u);
  for (int j = 1; j < 32; ++j) EXPECT_EQ(HeaderState(stream, j), 65536u);
}

TEST(RansFormat, OneEscapedSymbol) {
  // 4-bit alphabet, direct range {0, 1} (freqs 1000, 23), escape freq 1 (cum 1023).
  // Symbol 9 escapes. Encoder: raw step x = 65536 << 4 | 9 = 1048585, then the escape
  // x = (1048585 / 1) << 10 + 0 + 1023 = 1073752063 (0x400027FF).
  ASSERT_OK_AND_ASSIGN(auto t, FrequencyTable::Create(10, 4, 0, {1000, 23}, 1));
  ASSERT_OK_AND_ASSIGN(auto tables, TableSet::Create({t}));
  ASSERT_OK_AND_ASSIGN(auto stream, RansEncode(std::vector<uint16_t>{9}, {}, tables));
  ASSERT_EQ(stream.size(), 128u);
  EXPECT_EQ(HeaderState(stream, 0), 0x400027FFu);
  std::vector<uint16_t> out(1);
  ASSERT_OK(RansDecode(stream, {}, tables, out, RansDecoder::kScalar));
  EXPECT_EQ(out[0], 9);
}

TEST(RansFormat, RenormalisationWordOrder) {
  // 33 symbols: lane 0 codes symbols 0 and 32. Table P = 10: symbol 0 freq 1 (cum 0),
  // symbol 1 freq 1023 (cum 1). Lane 0, backwards: symbol 32 = 0 from x = 65536:
  // bound 1 << 22 > x, x = 65536 << 10 = 67108864. Then symbol 0 = 0: x >= 2^22, so
  // push the word 67108864 & 0xFFFF = 0 and x = 1024; x = 1024 << 10 = 1048576.
  // Every other lane codes symbol 1 once: x = (65536 / 1023) << 10 + 65536 % 1023 + 1
  // = 64 << 10 + 64 + 1 = 65601.
  ASSERT_OK_AND_ASSIGN(auto t, FrequencyTable::Create(10, 1, 0, {1, 1023}, 0));
  ASSERT_OK_AND_ASSIGN(auto tables, TableSet::Create({t}));
  std::vector<uint16_t> symbols(33, 1);
  symbols[0] = 0;
  symbols[32] = 0;
  ASSERT_OK_AND_ASSIGN(auto stream, RansEncode(symbols, {}, tables));
  ASSERT_EQ(stream.size(), 130u);
  EXPECT_EQ(HeaderState(stream, 0), 1048576u);
  for (int j = 1; j < 32; ++j) EXPECT_EQ(HeaderState(stream, j), 65601u);
  EXPECT_EQ(stream[128], 0);
  EXPECT_EQ(stream[129], 0);
  for (RansDecoder d : {RansDecoder::kScalar, RansDecoder::kAvx2, RansDecoder::kAvx512}) {
    if (!RansDecoderAvailable(d)) continue;
    std::vector<uint16_t> out(33);
    ASSERT_OK(RansDecode(stream, {}, tables, out, d));
    EXPECT_EQ(out, symbols);
  }
}

}  // namespace
}  // namespace kvstash::entropy
