#include "codec/entropy/frequency_table.h"

#include <gtest/gtest.h>

#include "codec/entropy/table_set.h"
#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

TEST(FrequencyTable, CreateValidates) {
  // 3 of 4 symbols without an escape.
  EXPECT_STATUS(FrequencyTable::Create(10, 2, 0, {500, 500, 24}, 0), kInvalidArgument);
  EXPECT_OK(FrequencyTable::Create(10, 2, 0, {500, 500, 23}, 1));
  EXPECT_OK(FrequencyTable::Create(10, 2, 3, {500, 500, 23, 1}, 0));
  EXPECT_STATUS(FrequencyTable::Create(9, 2, 0, {500, 12}, 0), kInvalidArgument);    // P < 10
  EXPECT_STATUS(FrequencyTable::Create(16, 1, 0, {1, 65535}, 0), kInvalidArgument);  // P > 15
  EXPECT_STATUS(FrequencyTable::Create(10, 0, 0, {1024}, 0), kInvalidArgument);      // 0 bits
  EXPECT_STATUS(FrequencyTable::Create(10, 17, 0, {1023}, 1), kInvalidArgument);
  EXPECT_STATUS(FrequencyTable::Create(10, 2, 4, {1023}, 1), kInvalidArgument);       // first >= 4
  EXPECT_STATUS(FrequencyTable::Create(10, 2, 0, {}, 1024), kInvalidArgument);        // no direct
  EXPECT_STATUS(FrequencyTable::Create(10, 1, 0, {1, 1, 1}, 0), kInvalidArgument);    // n > alphabet
  EXPECT_STATUS(FrequencyTable::Create(10, 2, 0, {1024, 0}, 1), kInvalidArgument);    // zero freq
  EXPECT_STATUS(FrequencyTable::Create(10, 2, 0, {500, 500}, 23), kInvalidArgument);  // 1023
  EXPECT_STATUS(FrequencyTable::Create(10, 1, 0, {500, 523}, 1), kInvalidArgument);   // full + esc
}

TEST(FrequencyTable, DirectIndexWrapsCyclically) {
  // 3-bit alphabet, range {6, 7, 0, 1}.
  ASSERT_OK_AND_ASSIGN(auto t, FrequencyTable::Create(10, 3, 6, {100, 400, 400, 100}, 24));
  EXPECT_EQ(t.DirectIndex(6), 0u);
  EXPECT_EQ(t.DirectIndex(7), 1u);
  EXPECT_EQ(t.DirectIndex(0), 2u);
  EXPECT_EQ(t.DirectIndex(1), 3u);
  for (uint32_t v : {2u, 3u, 4u, 5u}) EXPECT_EQ(t.DirectIndex(v), 4u);
  EXPECT_DOUBLE_EQ(t.Probability(7), 400.0 / 1024);
  EXPECT_DOUBLE_EQ(t.Probability(3), 24.0 / 1024 / 8);
}

TEST(FrequencyTable, SerializeParseRoundTripAndCorruption) {
  ASSERT_OK_AND_ASSIGN(auto t, FrequencyTable::Create(12, 8, 250, {1000, 2000, 1000, 95}, 1));
  const auto bytes = t.Serialize();
  ASSERT_EQ(bytes.size(), 10u + 8u);
  size_t used = 0;
  ASSERT_OK_AND_ASSIGN(auto back, FrequencyTable::Parse(bytes, &used));
  EXPECT_EQ(back, t);
  EXPECT_EQ(used, bytes.size());
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_STATUS(FrequencyTable::Parse(std::span(bytes).first(len), &used), kCorruption);
  }
  auto bad = bytes;
  bad[10] ^= 1;  // frequencies no longer sum to 2^12
  EXPECT_STATUS(FrequencyTable::Parse(bad, &used), kCorruption);
}

TEST(TableSet, LookupArraysMatchTheTables) {
  ASSERT_OK_AND_ASSIGN(auto a, FrequencyTable::Create(10, 3, 6, {100, 400, 400, 100}, 24));
  ASSERT_OK_AND_ASSIGN(auto b, FrequencyTable::Create(10, 3, 0, {128, 128, 128, 128, 128, 128, 128, 128}, 0));
  ASSERT_OK_AND_ASSIGN(auto set, TableSet::Create({a, b}));
  EXPECT_EQ(set.num_slots(), 2048u);
  // Table a, slot 600: cum of symbol 0 (index 2) is 500, freq 400, bias 100.
  EXPECT_EQ(set.decode_entries()[600], 400u | 100u << 16);
  EXPECT_EQ(set.decode_symbols()[600], 0);
  // Table a, slot 1000 is the escape (cum 1000, freq 24).
  EXPECT_EQ(set.decode_entries()[1023], 24u | 23u << 16 | 1u << 31);
  // Table b, slot 300: symbol 2, cum 256.
  EXPECT_EQ(set.decode_entries()[1024 + 300], 128u | 44u << 16);
  EXPECT_EQ(set.decode_symbols()[1024 + 300], 2);
  EXPECT_EQ(set.encode_entries()[set.encode_offset(0) + 4], 24u | 1000u << 16);
  EXPECT_EQ(set.encode_entries()[set.encode_offset(1) + 7], 128u | 896u << 16);
  ASSERT_OK_AND_ASSIGN(auto back, TableSet::Parse(set.Serialize()));
  EXPECT_EQ(back.table(0), a);
  EXPECT_EQ(back.table(1), b);
  ASSERT_OK_AND_ASSIGN(auto c, FrequencyTable::Create(11, 3, 0, {2000, 47}, 1));
  EXPECT_STATUS(TableSet::Create({a, c}), kInvalidArgument);
  EXPECT_STATUS(TableSet::Create({}), kInvalidArgument);
  auto bytes = set.Serialize();
  bytes.push_back(0);
  EXPECT_STATUS(TableSet::Parse(bytes), kCorruption);
}

}  // namespace
}  // namespace kvstash::entropy
