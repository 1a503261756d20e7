// Round trips of the rANS coder over precisions, alphabets, sizes, table selections
// and both CPU decoders; the decoders must agree symbol for symbol.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codec/entropy/rans.h"
#include "tests/codec/entropy/rans_test_util.h"
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
                         ::testing::Combine(::testing::Range(10, 16), ::testing::Values(1, 2, 5, 8, 12, 16)));

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

// The packed layout at 2P + symbol_bits = 32 (8-bit alphabets, P = 12) has no spare
// bit: escape entries carry a marker symbol (table_set.h). These sets exercise an exact
// marker, inexact ones (a direct symbol of a table with or without escape), and
// single-symbol tables with the largest frequency 2^P - 1.
FrequencyTable Table(int precision, uint32_t first, std::vector<uint32_t> freqs) {
  uint32_t total = 0;
  for (uint32_t f : freqs) total += f;
  const uint32_t escape = freqs.size() == 256 ? 0 : (1u << precision) - total;
  return FrequencyTable::Create(precision, 8, first, std::move(freqs), escape).value();
}

std::vector<uint32_t> Spread(size_t n, uint32_t total) {
  std::vector<uint32_t> f(n, total / static_cast<uint32_t>(n));
  f[0] += total - f[0] * static_cast<uint32_t>(n);
  return f;
}

// Symbols from all 256 values, biased towards `hot` (so that a marker coded directly
// occurs often), with alternating or random table indices.
void ExpectPackedRoundTrips(const TableSet& tables, uint16_t hot) {
  for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{95}, size_t{4097}, size_t{100003}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::mt19937_64 rng(n);
    std::vector<uint16_t> symbols(n);
    for (auto& v : symbols) v = rng() % 3 == 0 ? hot : static_cast<uint16_t>(rng() % 256);
    std::vector<uint16_t> alternating(n);
    for (size_t i = 0; i < n; ++i) alternating[i] = static_cast<uint16_t>(i % tables.size());
    ExpectRoundTrip(symbols, alternating, tables);
    ExpectRoundTrip(symbols, TableIndices(n, static_cast<int>(tables.size()), n + 1), tables);
  }
}

TEST(RansRoundTrip, PackedMarkerExact) {
  // Both tables escape; 200..255 is direct in neither, so the marker is never coded.
  ASSERT_OK_AND_ASSIGN(TableSet tables,
                       TableSet::Create({Table(12, 0, Spread(100, 4000)), Table(12, 50, Spread(150, 4090))}));
  ASSERT_NE(tables.packed_entries(), nullptr);
  EXPECT_TRUE(tables.packed_marker_exact());
  EXPECT_GE(tables.packed_escape_marker(), 200u);
  ExpectPackedRoundTrips(tables, 7);
}

TEST(RansRoundTrip, PackedMarkerCodedDirectly) {
  // Table 0 covers the whole alphabet (no escape), so the marker is one of its direct
  // symbols: lanes with the marker from table 0 are symbols, from table 1 escapes.
  std::vector<uint32_t> full = Spread(256, 4096);
  full[200] = 1;
  full[0] += 4096 / 256 - 1;
  ASSERT_OK_AND_ASSIGN(TableSet tables, TableSet::Create({Table(12, 0, full), Table(12, 0, {4095})}));
  ASSERT_NE(tables.packed_entries(), nullptr);
  EXPECT_FALSE(tables.packed_marker_exact());
  EXPECT_EQ(tables.packed_escape_marker(), 200u);
  ExpectPackedRoundTrips(tables, 200);
  ASSERT_OK_AND_ASSIGN(TableSet single, TableSet::Create({Table(12, 255, {4095})}));
  ASSERT_NE(single.packed_entries(), nullptr);
  ExpectPackedRoundTrips(single, 255);
}

TEST(RansRoundTrip, PackedMarkerInEveryTable) {
  // Two escaping tables whose direct ranges cover the alphabet: at P = 12 the marker
  // is a direct symbol of one of them (at P = 11 the field has a spare bit); no packed
  // layout at P = 13.
  for (int precision : {11, 12, 13}) {
    SCOPED_TRACE(::testing::Message() << "P=" << precision);
    const uint32_t total = (1u << precision) - 1;
    ASSERT_OK_AND_ASSIGN(TableSet tables, TableSet::Create({Table(precision, 0, Spread(128, total)),
                                                            Table(precision, 128, Spread(128, total))}));
    EXPECT_EQ(tables.packed_entries() != nullptr, precision <= 12);
    if (precision == 12) {
      EXPECT_FALSE(tables.packed_marker_exact());
      EXPECT_EQ(tables.packed_escape_marker(), 1u);
    }
    ExpectPackedRoundTrips(tables, 1);
  }
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
