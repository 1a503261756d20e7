// GGUF reader: a file built byte by byte here parses to the right metadata and
// tensors; every truncation and a set of targeted corruptions give Corruption.
#include "model/formats/gguf_reader.h"
#include "common/byte_io.h"
#include "kvstash/dtype_bits.h"
#include "tests/model/test_data.h"

namespace kvstash::model {
namespace {

void Str(ByteWriter& w, std::string_view s) {
  w.U64(s.size());
  w.Bytes(s);
}

// A GGUF v3 file with 3 metadata keys and two tensors: "a" F32 [3] = {1, -2, 0.5}
// at offset 0 and "b" Q8_0 [32, 2] (d = 0.5, q = j - 16) at offset 32.
std::vector<uint8_t> BuildFile(uint32_t b_type = 8, uint64_t b_offset = 32) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.U32(0x46554747);
  w.U32(3);
  w.U64(2);  // tensors
  w.U64(3);  // kv
  Str(w, "general.architecture");
  w.U32(8);
  Str(w, "llama");
  Str(w, "llama.block_count");
  w.U32(4);
  w.U32(30);
  Str(w, "tokenizer.ggml.tokens");
  w.U32(9);
  w.U32(8);
  w.U64(2);
  Str(w, "he");
  Str(w, "llo");
  Str(w, "a");
  w.U32(1);
  w.U64(3);
  w.U32(0);
  w.U64(0);
  Str(w, "b");
  w.U32(2);
  w.U64(32);
  w.U64(2);
  w.U32(b_type);
  w.U64(b_offset);
  while (out.size() % 32 != 0) out.push_back(0);
  for (float f : {1.0f, -2.0f, 0.5f}) w.U32(Bits(f));
  while (out.size() % 32 != 0) out.push_back(0);
  for (int row = 0; row < 2; ++row) {
    w.U16(F32ToF16(0.5f));
    for (int j = 0; j < 32; ++j) w.U8(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  }
  return out;
}

TEST(GgufReader, ParsesMetadataAndTensors) {
  const auto bytes = BuildFile();
  ASSERT_OK_AND_ASSIGN(auto f, GgufFile::Parse(bytes));
  EXPECT_EQ(f->version(), 3u);
  ASSERT_OK_AND_ASSIGN(std::string arch, f->GetString("general.architecture"));
  EXPECT_EQ(arch, "llama");
  ASSERT_OK_AND_ASSIGN(uint32_t blocks, f->GetU32("llama.block_count"));
  EXPECT_EQ(blocks, 30u);
  ASSERT_OK_AND_ASSIGN(const GgufValue* toks, f->GetArray("tokenizer.ggml.tokens"));
  EXPECT_EQ(toks->strings, (std::vector<std::string>{"he", "llo"}));
  EXPECT_STATUS(f->GetU32("missing"), kNotFound);
  EXPECT_STATUS(f->GetU32("general.architecture"), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto a, f->ReadF32("a"));
  EXPECT_EQ(a, (std::vector<float>{1.0f, -2.0f, 0.5f}));
  ASSERT_OK_AND_ASSIGN(auto b, f->ReadF32("b"));
  ASSERT_EQ(b.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(b[i], 0.5f * ((i % 32) - 16));
  EXPECT_STATUS(f->ReadF32("c"), kNotFound);
}

TEST(GgufReader, EveryTruncationIsCorruption) {
  const auto bytes = BuildFile();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = GgufFile::Parse(std::span<const uint8_t>(bytes.data(), n));
    EXPECT_STATUS(r, kCorruption) << "prefix of " << n << " bytes";
  }
}

TEST(GgufReader, TargetedCorruptions) {
  auto bytes = BuildFile();
  bytes[0] = 'X';
  EXPECT_STATUS(GgufFile::Parse(bytes), kCorruption);  // magic
  bytes = BuildFile();
  bytes[4] = 9;
  EXPECT_STATUS(GgufFile::Parse(bytes), kCorruption);  // version
  bytes = BuildFile();
  StoreLe<uint64_t>(&bytes[8], uint64_t{1} << 60);
  EXPECT_STATUS(GgufFile::Parse(bytes), kCorruption);  // tensor count
  bytes = BuildFile();
  StoreLe<uint64_t>(&bytes[24], 1000);  // first key length
  EXPECT_STATUS(GgufFile::Parse(bytes), kCorruption);
  EXPECT_STATUS(GgufFile::Parse(BuildFile(8, 33)), kCorruption);    // misaligned offset
  EXPECT_STATUS(GgufFile::Parse(BuildFile(8, 4096)), kCorruption);  // data past the end
  // A type we cannot dequantise parses, but reading it is NotSupported.
  ASSERT_OK_AND_ASSIGN(auto f, GgufFile::Parse(BuildFile(10, 32)));  // Q2_K
  EXPECT_STATUS(f->ReadF32("b"), kNotSupported);
}

TEST(GgufReader, OpenMissingFileIsIOError) {
  EXPECT_STATUS(GgufFile::Open("/nonexistent/x.gguf"), kIOError);
}

}  // namespace
}  // namespace kvstash::model
