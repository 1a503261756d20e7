// Corrupt and truncated streams: every decoder returns Corruption (or, for a bit
// flip that still forms a valid stream of other symbols, Ok) and never touches memory outside its
// buffers (run under ASan/UBSan in the sanitizer build); both decoders agree.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "codec/entropy/rans.h"
#include "codec/entropy/rans_format.h"
#include "tests/codec/entropy/rans_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

using testing::LaplaceTables;
using testing::Sample;

std::vector<RansDecoder> Decoders() {
  std::vector<RansDecoder> d = {RansDecoder::kScalar};
  if (RansDecoderAvailable(RansDecoder::kAvx2)) d.push_back(RansDecoder::kAvx2);
  if (RansDecoderAvailable(RansDecoder::kAvx512)) d.push_back(RansDecoder::kAvx512);
  return d;
}

struct Fixture {
  TableSet tables = LaplaceTables(12, 8, 3);
  std::vector<uint16_t> symbols;
  std::vector<uint16_t> idx;
  std::vector<uint8_t> stream;
  explicit Fixture(size_t n) {
    auto pmf = LaplacePmf(8, SymbolMapping::kTwosComplement, 0.0, 6.0).value();
    for (double& p : pmf) p += 1e-3;  // outliers: escapes
    symbols = Sample(pmf, n, 42);
    std::mt19937_64 rng(5);
    idx.resize(n);
    for (auto& t : idx) t = static_cast<uint16_t>(rng() % 3);
    stream = RansEncode(symbols, idx, tables).value();
  }
};

// Decodes with every decoder into an exactly sized heap buffer; returns the common
// status code (decoders must agree).
Status::Code DecodeAll(const Fixture& f, std::span<const uint8_t> stream, size_t n) {
  Status::Code first = Status::Code::kInternal;
  for (RansDecoder d : Decoders()) {
    std::vector<uint16_t> out(n);
    const Status s = RansDecode(stream, f.idx, f.tables, out, d);
    if (d == RansDecoder::kScalar) {
      first = s.code();
    } else {
      EXPECT_EQ(s.code(), first) << s.ToString();
    }
  }
  return first;
}

TEST(RansCorruption, EveryTruncationIsCorruption) {
  const Fixture f(2000);
  for (size_t len = 0; len < f.stream.size(); ++len) {
    // Copy into a buffer of exactly `len` bytes so ASan sees any over-read.
    const std::vector<uint8_t> cut(f.stream.begin(), f.stream.begin() + len);
    EXPECT_EQ(DecodeAll(f, cut, f.symbols.size()), Status::Code::kCorruption) << "len " << len;
  }
}

TEST(RansCorruption, TrailingBytesAreCorruption) {
  const Fixture f(500);
  for (size_t extra : {1, 2, 3, 64}) {
    std::vector<uint8_t> longer = f.stream;
    longer.resize(longer.size() + extra, 0x5A);
    EXPECT_EQ(DecodeAll(f, longer, f.symbols.size()), Status::Code::kCorruption);
  }
}

TEST(RansCorruption, WrongSymbolCountIsCorruption) {
  const Fixture f(1000);
  for (size_t n : {size_t{999}, size_t{1001}, size_t{968}, size_t{1032}}) {
    std::vector<uint16_t> out(n);
    std::vector<uint16_t> idx(n, 0);
    for (RansDecoder d : Decoders()) {
      EXPECT_STATUS(RansDecode(f.stream, idx, f.tables, out, d), kCorruption) << "n " << n;
    }
  }
}

TEST(RansCorruption, BitFlipsNeverCrashAndMostlyFail) {
  const Fixture f(3000);
  std::mt19937_64 rng(11);
  int corrupt = 0;
  const int trials = 2000;
  for (int i = 0; i < trials; ++i) {
    std::vector<uint8_t> bad = f.stream;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    const Status::Code c = DecodeAll(f, bad, f.symbols.size());
    ASSERT_TRUE(c == Status::Code::kOk || c == Status::Code::kCorruption);
    corrupt += c == Status::Code::kCorruption;
  }
  // rANS has no redundancy beyond the final-state and length checks: a flip in the
  // raw bits of an escape, or one whose perturbation dies out within a lane, decodes
  // to a different valid symbol sequence (integrity is the payload checksum's job,
  // docs/architecture.md §2). Measured with this seed: 76% of flips are caught.
  EXPECT_GT(corrupt, trials * 6 / 10);
}

TEST(RansCorruption, RandomBytesNeverCrash) {
  const Fixture f(700);
  std::mt19937_64 rng(12);
  for (int i = 0; i < 500; ++i) {
    std::vector<uint8_t> junk(128 + 2 * (rng() % 800));
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    const Status::Code c = DecodeAll(f, junk, f.symbols.size());
    EXPECT_TRUE(c == Status::Code::kCorruption || c == Status::Code::kOk);
  }
}

TEST(RansCorruption, LowInitialStateIsCorruption) {
  const Fixture f(100);
  std::vector<uint8_t> bad = f.stream;
  bad[4 * 7 + 2] = 0;  // lane 7's state < 2^16
  bad[4 * 7 + 3] = 0;
  EXPECT_EQ(DecodeAll(f, bad, f.symbols.size()), Status::Code::kCorruption);
}

// A table index out of range is InvalidArgument naming the first such position, in the
// first block of indices, past it, in the tail after the last whole block, and when a
// later block holds another.
TEST(RansCorruption, TableIndexOutOfRangeNamesTheFirst) {
  const Fixture f(1000);
  for (size_t at : {size_t{3}, size_t{64}, size_t{130}, size_t{995}}) {
    std::vector<uint16_t> idx = f.idx;
    idx[at] = 3;
    if (at + 200 < idx.size()) idx[at + 200] = 7;
    std::vector<uint16_t> out(f.symbols.size());
    for (RansDecoder d : Decoders()) {
      const Status st = RansDecode(f.stream, idx, f.tables, out, d);
      EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
      EXPECT_NE(st.message().find("table index 3 at " + std::to_string(at) + " "), std::string::npos)
          << st.message();
    }
  }
}

// The SIMD decoders check table indices group by group; an index out of range must
// still win over a corrupt stream (truncated, or with trailing words) wherever it is.
TEST(RansCorruption, TableIndexOutOfRangeBeatsCorruption) {
  const Fixture f(1000);
  for (size_t at : {size_t{0}, size_t{500}, size_t{999}}) {
    std::vector<uint16_t> idx = f.idx;
    idx[at] = 9;
    for (size_t cut : {size_t{0}, size_t{2}, f.stream.size() / 2}) {
      const std::vector<uint8_t> shorter(f.stream.begin(), f.stream.end() - cut);
      std::vector<uint16_t> out(f.symbols.size());
      for (RansDecoder d : Decoders()) {
        const Status st = RansDecode(shorter, idx, f.tables, out, d);
        EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
        EXPECT_NE(st.message().find("table index 9 at " + std::to_string(at) + " "), std::string::npos)
            << st.message();
      }
    }
  }
}

// Streams of one table (no table index), where the AVX-512 decoder decodes escapes in
// registers: flips and truncations give the same status and symbols in every decoder,
// for an 8-bit and a 16-bit alphabet with many escapes.
TEST(RansCorruption, OneTableEscapesAgree) {
  for (int bits : {8, 16}) {
    SCOPED_TRACE(::testing::Message() << "bits=" << bits);
    const TableSet tables = LaplaceTables(12, bits, 1);
    auto pmf = LaplacePmf(bits, SymbolMapping::kTwosComplement, 0.0, 4.0).value();
    for (double& p : pmf) p += 0.3 / static_cast<double>(pmf.size());  // ~25% escapes
    const std::vector<uint16_t> symbols = Sample(pmf, 2011, 77);
    ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> stream, RansEncode(symbols, {}, tables));
    std::mt19937_64 rng(13);
    for (int i = 0; i < 600; ++i) {
      std::vector<uint8_t> bad = stream;
      if (i % 3 == 0) {
        bad.resize(bad.size() - 2 * (1 + rng() % 40));
      } else {
        bad[kRansHeaderBytes + rng() % (bad.size() - kRansHeaderBytes)] ^=
            static_cast<uint8_t>(1u << (rng() % 8));
      }
      std::vector<uint16_t> expect(symbols.size());
      const Status ref = RansDecode(bad, {}, tables, expect, RansDecoder::kScalar);
      for (RansDecoder d : Decoders()) {
        std::vector<uint16_t> out(symbols.size());
        const Status st = RansDecode(bad, {}, tables, out, d);
        ASSERT_EQ(st.code(), ref.code()) << st.ToString() << " vs " << ref.ToString();
        ASSERT_EQ(st.message(), ref.message());
        if (ref.ok()) ASSERT_EQ(out, expect);
      }
    }
  }
}

}  // namespace
}  // namespace kvstash::entropy
