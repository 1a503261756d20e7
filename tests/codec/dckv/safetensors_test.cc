// The strict safetensors reader (codec/dckv/safetensors.h): a valid file's tensors,
// shapes, values and metadata; every malformed header, offset layout and value
// refused with a clear error; every truncation and many byte flips of a valid file
// refused or parsed without crashing (fuzz-style).
#include "codec/dckv/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "tests/codec/dckv/safetensors_writer.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

using testing::SafetensorsBytes;
using testing::TestTensor;

std::map<std::string, TestTensor> Sample() {
  return {{"a", {{2, 3}, {1.0f, -2.0f, 0.5f, 0.0f, -0.0f, 3.25f}}},
          {"b", {{4}, {10.0f, 20.0f, 30.0f, 1e-30f}}},
          {"s", {{}, {7.0f}}},
          {"z", {{0, 5}, {}}}};
}

// A file with this header text and `data` bytes after it.
std::vector<uint8_t> Raw(const std::string& header, std::vector<uint8_t> data) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.U64(header.size());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> Floats(std::initializer_list<float> v) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  for (float x : v) w.U32(std::bit_cast<uint32_t>(x));
  return out;
}

// The status message contains `part` (the error names what is wrong).
void ExpectError(const Result<SafetensorsFile>& r, Status::Code code, const std::string& part) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().ToString();
}

TEST(Safetensors, ReadsTensorsShapesValuesAndMetadata) {
  const auto bytes = SafetensorsBytes(Sample(), {{"format", "x/1"}, {"lambda", "0.5"}});
  ASSERT_OK_AND_ASSIGN(auto f, ParseSafetensors(bytes));
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors["a"].shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(f.tensors["a"].values, (std::vector<float>{1.0f, -2.0f, 0.5f, 0.0f, -0.0f, 3.25f}));
  EXPECT_TRUE(std::signbit(f.tensors["a"].values[4]));
  EXPECT_EQ(f.tensors["b"].values, (std::vector<float>{10.0f, 20.0f, 30.0f, 1e-30f}));
  EXPECT_TRUE(f.tensors["s"].shape.empty());
  EXPECT_EQ(f.tensors["s"].values, std::vector<float>{7.0f});
  EXPECT_EQ(f.tensors["z"].shape, (std::vector<uint64_t>{0, 5}));
  EXPECT_TRUE(f.tensors["z"].values.empty());
  EXPECT_EQ(f.metadata.size(), 2u);
  EXPECT_EQ(f.metadata["format"], "x/1");
  // No metadata, no tensors: an empty file of the format.
  ASSERT_OK_AND_ASSIGN(auto empty, ParseSafetensors(Raw("{}", {})));
  EXPECT_TRUE(empty.tensors.empty());
}

TEST(Safetensors, RefusesBadHeaderLengthAndJson) {
  ExpectError(ParseSafetensors(std::vector<uint8_t>{1, 2, 3}), Status::Code::kCorruption, "shorter");
  std::vector<uint8_t> huge(16, 0);
  huge[5] = 1;  // 2^40
  ExpectError(ParseSafetensors(huge), Status::Code::kCorruption, "above the limit");
  std::vector<uint8_t> past = Raw("{}", {});
  past[0] = 3;  // header of 3 bytes in a file with 2 after the length
  ExpectError(ParseSafetensors(past), Status::Code::kCorruption, "past the end");
  ExpectError(ParseSafetensors(Raw("{\"a\": ", {})), Status::Code::kCorruption, "not valid JSON");
  ExpectError(ParseSafetensors(Raw("[1, 2]", {})), Status::Code::kCorruption, "not a JSON object");
  ExpectError(ParseSafetensors(Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                   Floats({1, 2}))),
              Status::Code::kCorruption, "duplicate header key 'a'");
  ExpectError(ParseSafetensors(Raw(R"({"__metadata__":{"k":1}})", {})), Status::Code::kCorruption, "'k'");
  ExpectError(ParseSafetensors(Raw(R"({"__metadata__":[]})", {})), Status::Code::kCorruption, "__metadata__");
}

TEST(Safetensors, RefusesBadEntries) {
  const auto one = Floats({1.5f});
  auto entry = [&](const std::string& body) { return ParseSafetensors(Raw("{\"t.x\":" + body + "}", one)); };
  ExpectError(entry(R"({"dtype":"F16","shape":[2],"data_offsets":[0,4]})"), Status::Code::kInvalidArgument,
              "tensor 't.x': dtype F16");
  ExpectError(entry(R"({"dtype":"F32","shape":[1]})"), Status::Code::kCorruption, "tensor 't.x'");
  ExpectError(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1})"),
              Status::Code::kCorruption, "exactly dtype");
  ExpectError(entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), Status::Code::kCorruption,
              "non-negative integer");
  ExpectError(entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), Status::Code::kCorruption,
              "non-negative integer");
  ExpectError(entry(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})"), Status::Code::kCorruption,
              "shape is not an array");
  ExpectError(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), Status::Code::kCorruption,
              "does not match the shape");
  ExpectError(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})"), Status::Code::kCorruption,
              "begin <= end");
  ExpectError(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"), Status::Code::kCorruption,
              "data_offsets");
  ExpectError(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), Status::Code::kCorruption,
              "past the end");
  ExpectError(entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})"),
              Status::Code::kCorruption, "too large");
  ExpectError(entry(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})"), Status::Code::kCorruption,
              "dtype is not a string");
}

TEST(Safetensors, RefusesOverlapsHolesAndNonFiniteValues) {
  const std::string t1 = R"("p":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  ExpectError(ParseSafetensors(Raw("{" + t1 + R"(,"q":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                   Floats({1, 2}))),
              Status::Code::kCorruption, "overlaps");
  ExpectError(ParseSafetensors(Raw("{" + t1 + R"(,"q":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                   Floats({1, 2, 3, 4}))),
              Status::Code::kCorruption, "hole");
  ExpectError(ParseSafetensors(Raw("{" + t1 + "}", Floats({1, 2, 3}))), Status::Code::kCorruption,
              "end of the data buffer");
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    ExpectError(ParseSafetensors(Raw("{" + t1 + "}", Floats({1.0f, bad}))), Status::Code::kCorruption,
                "tensor 'p': non-finite value at index 1");
  }
}

// Every truncation of a valid file is refused; random byte flips either parse or are
// refused (never crash), and a flip in a value's exponent that makes it non-finite is
// refused.
TEST(Safetensors, FuzzTruncationsAndFlips) {
  const auto bytes = SafetensorsBytes(Sample(), {{"format", "x/1"}});
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ParseSafetensors(std::span(bytes).first(n)).ok()) << n;
  }
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(ParseSafetensors(longer).ok());
  std::mt19937 rng(42);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 4000; ++i) {
    auto b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    auto r = ParseSafetensors(b);
    (r.ok() ? parsed : refused)++;
    if (r.ok()) {
      for (const auto& [name, t] : r->tensors)
        for (float v : t.values) EXPECT_TRUE(std::isfinite(v)) << name;
    }
  }
  EXPECT_GT(refused, 0);
  std::printf("[ info ] byte flips: %d parsed, %d refused\n", parsed, refused);
}

}  // namespace
}  // namespace kvstash::dckv
