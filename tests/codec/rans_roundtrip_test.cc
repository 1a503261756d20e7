// Round trips of the rANS coder over precisions, alphabets, sizes, table selections
// and both CPU decoders; the decoders must agree symbol for symbol.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codec/entropy/rans.h"
#include "tests/codec/rans_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

using testing::LaplaceTables;
using testing::Sample;
using testing::ToBytes;

const size_t kSizes[] = {0, 1, 31, 32, 33, 63, 64, 65, 4095, 4096, 4097};

std::vector<RansDecoder> Decoders() {
  std::vector<RansDecoder> d = {RansDecoder::kScalar};
  if (RansDecoderAvailable(RansDecoder::kAvx2)) d.push_back(RansDecoder::kAvx2);
  if (RansDecoderAvailable(RansDecoder::kAvx512)) d.push_back(RansDecoder::kAvx512);
  return d;
}

// Symbols with a Laplace core plus 2% uniform outliers, so that escapes occur.
std::vector<uint16_t> TestSymbols(int symbol_bits, size_t n, uint64_t seed) {
  auto core = LaplacePmf(symbol_bits, SymbolMapping::kTwosComplement, 0.0, 3.0).value();
  const double uniform = 0.02 / static_cast<double>(core.size());
  for (double& p : core) p = 0.98 * p + uniform;
  return Sample(core, n, seed);
}

// Table index per symbol: a deterministic pattern over `count` tables.
std::vector<uint16_t> TableIndices(size_t n, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> idx(n);
  for (auto& t : idx) t = static_cast<uint16_t>(rng() % count);
  return idx;
}

void ExpectRoundTrip(const std::vector<uint16_t>& symbols, const std::vector<uint16_t>& idx,
                     const TableSet& tables) {
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> stream, RansEncode(symbols, idx, tables));
  for (RansDecoder d : Decoders()) {
    std::vector<uint16_t> out(symbols.size(), 0xABCD);
    ASSERT_OK(RansDecode(stream, idx, tables, out, d));
    ASSERT_EQ(out, symbols) << "decoder " << static_cast<int>(d);
  }
  if (tables.symbol_bits() <= 8) {
    const std::vector<uint8_t> bytes = ToBytes(symbols);
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> stream8, RansEncode(bytes, idx, tables));
    ASSERT_EQ(stream8, stream) << "8-bit input must give the same stream";
    for (RansDecoder d : Decoders()) {
      std::vector<uint8_t> out(symbols.size(), 0xAB);
      ASSERT_OK(RansDecode(stream, idx, tables, out, d));
      ASSERT_EQ(out, bytes) << "decoder " << static_cast<int>(d);
    }
  }
}

class RansRoundTrip : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(RansRoundTrip, SizesSingleAndMultiTable) {
  const auto [precision, symbol_bits] = GetParam();
  const TableSet one = LaplaceTables(precision, symbol_bits, 1);
  const TableSet many = LaplaceTables(precision, symbol_bits, 7);
  for (size_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const auto symbols = TestSymbols(symbol_bits, n, 1000 + n);
    ExpectRoundTrip(symbols, {}, one);
    ExpectRoundTrip(symbols, TableIndices(n, 7, n), many);
  }
}

INSTANTIATE_TEST_SUITE_P(PrecisionsAndAlphabets, RansRoundTrip,
                         ::testing::Combine(::testing::Range(10, 16),
                                            ::testing::Values(1, 2, 5, 8, 12, 16)));

TEST(RansRoundTrip, OneMillionSymbols) {
  const TableSet tables = LaplaceTables(12, 8, 4);
  const size_t n = 1000000;
  const auto symbols = TestSymbols(8, n, 7);
  ExpectRoundTrip(symbols, {}, tables);
  ExpectRoundTrip(symbols, TableIndices(n, 4, 8), tables);
}

TEST(RansRoundTrip, EveryValueOfA16BitAlphabetEscapesOrCodes) {
  // A narrow table (most values escape) must still code all 65536 values, in order
  // and reversed, with both decoders.
  const TableSet tables = LaplaceTables(11, 16, 1);
  std::vector<uint16_t> symbols(65536);
  for (size_t v = 0; v < symbols.size(); ++v) symbols[v] = static_cast<uint16_t>(v);
  ExpectRoundTrip(symbols, {}, tables);
  std::reverse(symbols.begin(), symbols.end());
  ExpectRoundTrip(symbols, {}, tables);
}

TEST(RansRoundTrip, AllEscapesAndNoEscapes) {
  const TableSet tables = LaplaceTables(12, 8, 1);
  const FrequencyTable& t = tables.table(0);
  ASSERT_GT(t.escape_freq(), 0u);
  std::vector<uint16_t> inside, outside;
  for (uint32_t v = 0; v < 256; ++v) {
    (t.DirectIndex(v) < t.num_direct() ? inside : outside).push_back(static_cast<uint16_t>(v));
  }
  ASSERT_FALSE(outside.empty());
  for (const auto* base : {&inside, &outside}) {
    std::vector<uint16_t> symbols;
    for (int rep = 0; symbols.size() < 5000; ++rep) {
      symbols.insert(symbols.end(), base->begin(), base->end());
    }
    ExpectRoundTrip(symbols, {}, tables);
  }
}

TEST(RansRoundTrip, WideTablesWithoutEscape) {
  // Uniform-ish pmf over the full 8-bit alphabet: the table has no escape.
  std::vector<double> pmf(256);
  for (size_t v = 0; v < pmf.size(); ++v) pmf[v] = 1.0 + static_cast<double>(v % 7);
  ASSERT_OK_AND_ASSIGN(FrequencyTable t, BuildTable(pmf, {.precision = 10}));
  ASSERT_EQ(t.escape_freq(), 0u);
  ASSERT_OK_AND_ASSIGN(TableSet tables, TableSet::Create({t}));
  ExpectRoundTrip(Sample(pmf, 10007, 3), {}, tables);
}

TEST(RansEncode, RejectsBadInput) {
  const TableSet tables = LaplaceTables(12, 8, 2);
  const std::vector<uint16_t> symbols = {1, 2, 256};
  EXPECT_STATUS(RansEncode(symbols, {}, tables), kInvalidArgument);
  const std::vector<uint16_t> ok = {1, 2, 3};
  const std::vector<uint16_t> short_idx = {0, 1};
  EXPECT_STATUS(RansEncode(ok, short_idx, tables), kInvalidArgument);
  const std::vector<uint16_t> bad_idx = {0, 1, 2};
  EXPECT_STATUS(RansEncode(ok, bad_idx, tables), kInvalidArgument);
}

TEST(RansDecode, RejectsBadArguments) {
  const TableSet tables = LaplaceTables(12, 8, 2);
  const std::vector<uint16_t> symbols = {1, 2, 3};
  ASSERT_OK_AND_ASSIGN(auto stream, RansEncode(symbols, {}, tables));
  std::vector<uint16_t> out(3);
  const std::vector<uint16_t> bad_idx = {0, 2, 0};
  EXPECT_STATUS(RansDecode(stream, bad_idx, tables, out), kInvalidArgument);
  const std::vector<uint16_t> short_idx = {0};
  EXPECT_STATUS(RansDecode(stream, short_idx, tables, out), kInvalidArgument);
  const TableSet wide = LaplaceTables(12, 9, 1);
  std::vector<uint8_t> out8(3);
  EXPECT_STATUS(RansDecode(stream, {}, wide, out8), kInvalidArgument);
  if (!RansDecoderAvailable(RansDecoder::kAvx2)) {
    EXPECT_STATUS(RansDecode(stream, {}, tables, out, RansDecoder::kAvx2), kNotSupported);
  }
  if (!RansDecoderAvailable(RansDecoder::kAvx512)) {
    EXPECT_STATUS(RansDecode(stream, {}, tables, out, RansDecoder::kAvx512), kNotSupported);
  }
}

}  // namespace
}  // namespace kvstash::entropy
