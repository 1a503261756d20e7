// ggml dequantisation: hand-derived blocks, and gguf-py's values for seeded blocks of
// every supported type (tests/model/data/dequant_vectors.json and, for Q5_0, Q5_1 and
// Q5_K, dequant_vectors_q5.json; tools/gen_dequant_vectors.py).
#include <cstring>

#include "kvstash/dtype_bits.h"
#include "model/formats/ggml_types.h"
#include "tests/model/test_data.h"

namespace kvstash::model {
namespace {

std::vector<uint8_t> Unhex(const std::string& h) {
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

TEST(Dequant, Q4_1HandDerived) {
  // d = 0.5, m = -1: x[j] = 0.5 * (j % 16) - 1 for the low nibbles, x[j+16] = 0.5 * 15 - 1.
  uint8_t b[20];
  PutHalf(b, 0.5f);
  PutHalf(b + 2, -1.0f);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | (15 << 4));
  std::vector<float> y(32);
  ASSERT_OK(Dequantize(GgmlType::kQ4_1, b, y));
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * j - 1.0f);
    EXPECT_EQ(y[j + 16], 6.5f);
  }
}

TEST(Dequant, Q8_0AndQ4_0HandDerived) {
  uint8_t b8[34];
  PutHalf(b8, 0.25f);
  for (int j = 0; j < 32; ++j) b8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  std::vector<float> y(32);
  ASSERT_OK(Dequantize(GgmlType::kQ8_0, b8, y));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * (j - 16));
  uint8_t b4[18];
  PutHalf(b4, 2.0f);
  for (int j = 0; j < 16; ++j) b4[2 + j] = static_cast<uint8_t>(j | (8 << 4));
  ASSERT_OK(Dequantize(GgmlType::kQ4_0, b4, y));
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8));
    EXPECT_EQ(y[j + 16], 0.0f);
  }
}

TEST(Dequant, Q4_KHandDerived) {
  // d = 1, dmin = 0.5; sub-block scales 1..8 and mins 0..7 packed as ggml packs them.
  uint8_t b[144] = {};
  PutHalf(b, 1.0f);
  PutHalf(b + 2, 0.5f);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) { sc[j] = static_cast<uint8_t>(j + 1 + (j >= 4 ? 32 : 0)); mn[j] = static_cast<uint8_t>(j + (j >= 4 ? 50 : 0)); }
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i % 16) | (((i + 3) % 16) << 4));
  std::vector<float> y(256);
  ASSERT_OK(Dequantize(GgmlType::kQ4_K, b, y));
  for (int sub = 0; sub < 8; ++sub) {
    for (int l = 0; l < 32; ++l) {
      const int byte = (sub / 2) * 32 + l;
      const int q = sub % 2 == 0 ? byte % 16 : (byte + 3) % 16;
      EXPECT_EQ(y[sub * 32 + l], 1.0f * sc[sub] * q - 0.5f * mn[sub]) << sub << " " << l;
    }
  }
}

TEST(Dequant, Q5_0HandDerived) {
  // d = 0.5; low nibbles j % 16, fifth bits set for even j (first half) and for j >= 24.
  uint8_t b[22];
  PutHalf(b, 0.5f);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) qh |= (j % 2 == 0 ? 1u : 0u) << j;
  for (int j = 16; j < 32; ++j) qh |= (j >= 24 ? 1u : 0u) << j;
  std::memcpy(b + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> y(32);
  ASSERT_OK(Dequantize(GgmlType::kQ5_0, b, y));
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * ((j | (j % 2 == 0 ? 16 : 0)) - 16)) << j;
    EXPECT_EQ(y[j + 16], 0.5f * (((15 - j) | (j + 16 >= 24 ? 16 : 0)) - 16)) << j + 16;
  }
  // Q5_1 with the same quants, d = 0.25 and m = 1: x = d * q + m.
  uint8_t b1[24];
  PutHalf(b1, 0.25f);
  PutHalf(b1 + 2, 1.0f);
  std::memcpy(b1 + 4, b + 2, 20);
  ASSERT_OK(Dequantize(GgmlType::kQ5_1, b1, y));
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y[j], 0.25f * (j | (j % 2 == 0 ? 16 : 0)) + 1.0f) << j;
}

// Every case of a vector file written by tools/gen_dequant_vectors.py (gguf-py's numpy
// dequantisers on seeded blocks) dequantises to its values. gguf-py computes in float32
// with numpy; products may round once differently.
void ExpectMatchesVectors(const char* file, size_t cases) {
  const auto j = testing::LoadJson(file);
  ASSERT_EQ(j["cases"].size(), cases);
  for (const auto& c : j["cases"]) {
    const auto bytes = Unhex(c["bytes_hex"].get<std::string>());
    const auto want = testing::Floats(c["values"]);
    const uint32_t id = c["type_id"].get<uint32_t>();
    ASSERT_TRUE(IsSupportedGgmlType(id)) << c["type"];
    std::vector<float> got(want.size());
    ASSERT_OK(Dequantize(static_cast<GgmlType>(id), bytes, got));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::max(1.0f, std::abs(want[i]))) << c["type"] << " element " << i;
    }
  }
}

TEST(Dequant, Q5TypesMatchGgufPy) { ExpectMatchesVectors("dequant_vectors_q5.json", 3); }

TEST(Dequant, MatchesGgufPy) { ExpectMatchesVectors("dequant_vectors.json", 7); }

TEST(Dequant, RejectsBadSizes) {
  std::vector<float> y(31);
  std::vector<uint8_t> b(20);
  EXPECT_STATUS(Dequantize(GgmlType::kQ4_1, b, y), kInvalidArgument);  // 31 not a block multiple
  y.resize(32);
  b.resize(19);
  EXPECT_STATUS(Dequantize(GgmlType::kQ4_1, b, y), kInvalidArgument);  // short input
  y.resize(0);
  b.resize(0);
  EXPECT_OK(Dequantize(GgmlType::kQ6_K, b, y));  // empty is fine
  EXPECT_FALSE(IsSupportedGgmlType(10));         // Q2_K
  EXPECT_FALSE(IsSupportedGgmlType(1000));
}

}  // namespace
}  // namespace kvstash::model
