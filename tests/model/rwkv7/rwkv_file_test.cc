#include "model/rwkv7/rwkv_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/byte_io.h"
#include "tests/model/rwkv7/test_files.h"
#include "tests/support/test_util.h"

namespace kvstash::rwkv7 {
namespace {

RwkvFileTensor F32Tensor(std::string name, std::vector<uint64_t> dims, std::vector<float> v) {
  RwkvFileTensor t;
  t.name = std::move(name);
  t.data_type = 0;
  t.dims = std::move(dims);
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

RwkvFile SmallFile() {
  RwkvFile f;
  f.header = {101, 4, 2, 1, 0};
  f.tensors.push_back(F32Tensor("emb.weight", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
  f.tensors.push_back(F32Tensor("ln_out.bias", {2}, {-0.0f, 0.5f}));
  return f;
}

std::vector<uint8_t> SmallBytes() { return SerializeRwkvFile(SmallFile()).value(); }

void PutU32(std::vector<uint8_t>& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Offsets in SmallBytes(): header 24; record 0 = 12 + 2 dims * 4 + 10 name + 32 data.
constexpr size_t kRec0 = 24;
constexpr size_t kRec1 = kRec0 + 12 + 8 + 10 + 32;

TEST(RwkvFileTest, LayoutIsAsDocumented) {
  const std::vector<uint8_t> b = SmallBytes();
  ASSERT_EQ(b.size(), kRec1 + 12 + 4 + 11 + 8);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "fmgg");
  EXPECT_EQ(LoadLe<uint32_t>(&b[4]), 101u);
  EXPECT_EQ(LoadLe<uint32_t>(&b[8]), 4u);           // n_vocab
  EXPECT_EQ(LoadLe<uint32_t>(&b[12]), 2u);          // n_embd
  EXPECT_EQ(LoadLe<uint32_t>(&b[16]), 1u);          // n_layer
  EXPECT_EQ(LoadLe<uint32_t>(&b[kRec0]), 2u);       // n_dims
  EXPECT_EQ(LoadLe<uint32_t>(&b[kRec0 + 4]), 10u);  // name length
  EXPECT_EQ(LoadLe<uint32_t>(&b[kRec0 + 12]), 2u);  // dims[0] (fastest)
  EXPECT_EQ(LoadLe<uint32_t>(&b[kRec0 + 16]), 4u);
  EXPECT_EQ(std::string(b.begin() + kRec0 + 20, b.begin() + kRec0 + 30), "emb.weight");
  EXPECT_EQ(LoadLe<uint32_t>(&b[kRec0 + 30]), 0x3F800000u);  // 1.0f
}

TEST(RwkvFileTest, RoundTripsExactly) {
  const std::vector<uint8_t> b = SmallBytes();
  ASSERT_OK_AND_ASSIGN(RwkvFile f, ParseRwkvFile(b));
  EXPECT_EQ(f, SmallFile());
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> again, SerializeRwkvFile(f));
  EXPECT_EQ(again, b);
  ASSERT_NE(f.Find("ln_out.bias"), nullptr);
  EXPECT_EQ(f.Find("nope"), nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<float> v, f.Find("ln_out.bias")->ToF32());
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(std::signbit(v[0]));
  EXPECT_EQ(v[1], 0.5f);
}

TEST(RwkvFileTest, CommittedFixtureRoundTrips) {
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> b, ReadFileBytes(testing::SyntheticModelPath()));
  ASSERT_OK_AND_ASSIGN(RwkvFile f, ParseRwkvFile(b));
  EXPECT_EQ(f.header, (RwkvFileHeader{101, 16, 8, 3, 0}));
  // emb, ln0 x2; 25 tensors in layer 0, 28 (with v0, v1, v2) in layers 1 and 2;
  // ln_out x2, head.
  EXPECT_EQ(f.tensors.size(), 3u + 25 + 2 * 28 + 3);
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> again, SerializeRwkvFile(f));
  EXPECT_EQ(again, b);
}

TEST(RwkvFileTest, ReadsVersion100AndFp16) {
  RwkvFile f = SmallFile();
  f.header.version = 100;
  RwkvFileTensor h;
  h.name = "half";
  h.data_type = 1;
  h.dims = {3};
  for (uint16_t bits : {0x3C00, 0xC000, 0x7BFF}) {  // 1, -2, 65504
    h.data.push_back(static_cast<uint8_t>(bits));
    h.data.push_back(static_cast<uint8_t>(bits >> 8));
  }
  f.tensors.push_back(h);
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> b, SerializeRwkvFile(f));
  ASSERT_OK_AND_ASSIGN(RwkvFile g, ParseRwkvFile(b));
  ASSERT_OK_AND_ASSIGN(std::vector<float> v, g.Find("half")->ToF32());
  EXPECT_EQ(v, (std::vector<float>{1.0f, -2.0f, 65504.0f}));
}

TEST(RwkvFileTest, EveryTruncationIsCorruptionOrAShorterValidFile) {
  const std::vector<uint8_t> b = SmallBytes();
  for (size_t n = 0; n < b.size(); ++n) {
    auto r = ParseRwkvFile(std::span(b).first(n));
    if (n == 24 || n == kRec1) {
      ASSERT_OK(r);  // a header alone, or header + first record, is a valid file
      EXPECT_EQ(r->tensors.size(), n == 24 ? 0u : 1u);
    } else {
      EXPECT_STATUS(r, kCorruption) << "prefix " << n;
    }
  }
}

TEST(RwkvFileTest, RejectsMalformedFields) {
  struct Case {
    const char* what;
    size_t offset;
    uint32_t value;
    Status::Code code;
  };
  const Case cases[] = {
      {"bad magic", 0, 0x67676d6c, Status::Code::kCorruption},
      {"version 102", 4, 102, Status::Code::kNotSupported},
      {"version 1", 4, 1, Status::Code::kNotSupported},
      {"n_vocab 0", 8, 0, Status::Code::kCorruption},
      {"n_embd 0", 12, 0, Status::Code::kCorruption},
      {"n_embd huge", 12, 1u << 20, Status::Code::kCorruption},
      {"n_layer 0", 16, 0, Status::Code::kCorruption},
      {"header type 5", 20, 5, Status::Code::kCorruption},
      {"0 dims", kRec0, 0, Status::Code::kCorruption},
      {"5 dims", kRec0, 5, Status::Code::kCorruption},
      {"name length 0", kRec0 + 4, 0, Status::Code::kCorruption},
      {"name length huge", kRec0 + 4, 1u << 30, Status::Code::kCorruption},
      {"type 4 (unused id)", kRec0 + 8, 4, Status::Code::kCorruption},
      {"type Q5_1", kRec0 + 8, 8, Status::Code::kNotSupported},
      {"type Q8_0", kRec0 + 8, 9, Status::Code::kNotSupported},
      {"zero dim", kRec0 + 12, 0, Status::Code::kCorruption},
      {"dim past the end", kRec0 + 16, 1000, Status::Code::kCorruption},
      {"dim far past the end", kRec0 + 16, 0xFFFFFFFF, Status::Code::kCorruption},
      {"second record reads its name as dims", kRec1, 4, Status::Code::kCorruption},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = SmallBytes();
    PutU32(b, c.offset, c.value);
    EXPECT_TRUE(testing::HasCode(ParseRwkvFile(b), c.code)) << c.what;
  }
}

TEST(RwkvFileTest, RejectsHugeDimsWithoutOverflow) {
  std::vector<uint8_t> b = SmallBytes();
  b.resize(kRec1);
  ByteWriter w(&b);
  for (uint32_t v : {4u, 4u, 0u, 0x80000000u, 0x80000000u, 0x80000000u, 0x80000000u}) w.U32(v);
  w.Bytes(std::string_view("abcd"));
  EXPECT_STATUS(ParseRwkvFile(b), kCorruption);
}

TEST(RwkvFileTest, RejectsDuplicateNames) {
  RwkvFile f = SmallFile();
  f.tensors.push_back(f.tensors[0]);
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> b, SerializeRwkvFile(f));
  EXPECT_STATUS(ParseRwkvFile(b), kCorruption);
}

TEST(RwkvFileTest, SerializeRejectsWhatItCannotWrite) {
  RwkvFile f = SmallFile();
  f.tensors[1].data.pop_back();
  EXPECT_STATUS(SerializeRwkvFile(f), kInvalidArgument);
  f = SmallFile();
  f.tensors[1].data_type = 8;
  EXPECT_STATUS(SerializeRwkvFile(f), kInvalidArgument);
  f = SmallFile();
  f.tensors[1].dims = {};
  EXPECT_STATUS(SerializeRwkvFile(f), kInvalidArgument);
  f = SmallFile();
  f.tensors[1].name.clear();
  EXPECT_STATUS(SerializeRwkvFile(f), kInvalidArgument);
}

TEST(RwkvFileTest, ToF32ChecksTypeAndSize) {
  RwkvFileTensor t = F32Tensor("x", {2}, {1, 2});
  t.data.pop_back();
  EXPECT_STATUS(t.ToF32(), kCorruption);
  t = F32Tensor("x", {2}, {1, 2});
  t.data_type = 2;
  EXPECT_STATUS(t.ToF32(), kNotSupported);
}

TEST(RwkvFileTest, MissingFileIsIOError) {
  EXPECT_STATUS(ReadFileBytes("/nonexistent/kvstash/model.bin"), kIOError);
}

TEST(RwkvFileTest, TypeNames) {
  EXPECT_EQ(RwkvDataTypeName(0), "F32");
  EXPECT_EQ(RwkvDataTypeName(1), "F16");
  EXPECT_EQ(RwkvDataTypeName(8), "Q5_1");
  EXPECT_EQ(RwkvDataTypeName(4), "unknown");
}

}  // namespace
}  // namespace kvstash::rwkv7
