// Segment framing: round trips over segment boundaries, directory checks.
#include <gtest/gtest.h>

#include <vector>

#include "codec/entropy/rans_segments.h"
#include "tests/codec/entropy/rans_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

using testing::LaplaceTables;
using testing::Sample;

TEST(RansSegments, RoundTripAcrossBoundaries) {
  const TableSet tables = LaplaceTables(11, 8, 2);
  auto pmf = LaplacePmf(8, SymbolMapping::kTwosComplement, 0.0, 4.0).value();
  for (size_t n : {0, 1, 63, 64, 65, 127, 128, 129, 1000}) {
    const auto symbols = Sample(pmf, n, n);
    std::vector<uint16_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = static_cast<uint16_t>(i % 2);
    std::vector<uint8_t> framed;
    ASSERT_OK(RansEncodeSegmentedAppend(symbols, idx, tables, 64, &framed));
    ASSERT_OK_AND_ASSIGN(SegmentDirectory dir, ParseSegmentDirectory(framed));
    EXPECT_EQ(dir.num_symbols, n);
    EXPECT_EQ(dir.num_segments(), (n + 63) / 64);
    // Each segment is an independent stream of its slice.
    for (uint32_t s = 0; s < dir.num_segments(); ++s) {
      const size_t begin = s * 64, len = dir.SegmentLength(s);
      ASSERT_OK_AND_ASSIGN(auto alone,
                           RansEncode(std::span(symbols).subspan(begin, len),
                                      std::span<const uint16_t>(idx).subspan(begin, len), tables));
      EXPECT_EQ(alone,
                std::vector<uint8_t>(framed.begin() + dir.offsets[s], framed.begin() + dir.offsets[s + 1]));
    }
    std::vector<uint16_t> out(n);
    ASSERT_OK(RansDecodeSegmented(framed, idx, tables, out));
    EXPECT_EQ(out, symbols);
  }
}

TEST(RansSegments, RejectsBadFraming) {
  const TableSet tables = LaplaceTables(11, 8, 1);
  std::vector<uint16_t> symbols(300, 0);
  std::vector<uint8_t> framed;
  EXPECT_STATUS(RansEncodeSegmentedAppend(symbols, {}, tables, 48, &framed), kInvalidArgument);
  EXPECT_STATUS(RansEncodeSegmentedAppend(symbols, {}, tables, 0, &framed), kInvalidArgument);
  ASSERT_OK(RansEncodeSegmentedAppend(symbols, {}, tables, 128, &framed));
  std::vector<uint16_t> out(300);
  ASSERT_OK(RansDecodeSegmented(framed, {}, tables, out));
  for (size_t len = 0; len < framed.size(); ++len) {
    std::vector<uint8_t> cut(framed.begin(), framed.begin() + len);
    EXPECT_STATUS(RansDecodeSegmented(cut, {}, tables, out), kCorruption) << len;
  }
  std::vector<uint16_t> wrong(299);
  EXPECT_STATUS(RansDecodeSegmented(framed, {}, tables, wrong), kCorruption);
  std::vector<uint8_t> bad = framed;
  bad[12] = 4;  // segment count 4 for 300 symbols of 128
  EXPECT_STATUS(ParseSegmentDirectory(bad), kCorruption);
}

}  // namespace
}  // namespace kvstash::entropy
