#include "model/rwkv7/rwkv7_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kvstash/payload_format.h"
#include "tests/support/test_util.h"

namespace kvstash::rwkv7 {
namespace {

Rwkv7Config SmallConfig() {
  Rwkv7Config c;
  c.n_vocab = 16;
  c.n_embd = 6;
  c.n_layer = 3;
  c.n_head = 2;
  c.head_size = 3;
  return c;
}

// A state with distinct values everywhere, including -0.0, a NaN with a payload,
// infinities and a subnormal, to check the export copies bit patterns.
Rwkv7State FilledState(const Rwkv7Config& c, uint32_t seed) {
  Rwkv7State s = Rwkv7State::Zeros(c);
  s.tokens = 1234;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (Rwkv7LayerState& l : s.layers) {
    for (float& x : l.att_shift) x = dist(rng);
    for (float& x : l.ffn_shift) x = dist(rng);
    for (float& x : l.wkv) x = dist(rng);
  }
  s.layers[0].att_shift[0] = -0.0f;
  const uint32_t nan_bits = 0x7FC01234u;
  std::memcpy(&s.layers[1].wkv[5], &nan_bits, 4);
  s.layers[2].ffn_shift[3] = std::numeric_limits<float>::infinity();
  s.layers[2].wkv[0] = std::numeric_limits<float>::denorm_min();
  return s;
}

TEST(Rwkv7StateTest, ZerosHasTheModelShape) {
  const Rwkv7Config c = SmallConfig();
  const Rwkv7State s = Rwkv7State::Zeros(c);
  EXPECT_EQ(s.tokens, 0u);
  ASSERT_EQ(s.layers.size(), 3u);
  EXPECT_EQ(s.layers[2].att_shift, std::vector<float>(6, 0.0f));
  EXPECT_EQ(s.layers[2].ffn_shift.size(), 6u);
  EXPECT_EQ(s.layers[2].wkv.size(), 2u * 3 * 3);
  EXPECT_OK(s.CheckShape(c));
  EXPECT_EQ(c.StateScalars(), 3u * (6 + 6 + 18));
}

TEST(Rwkv7StateTest, ExportNamesShapesAndOrder) {
  const Rwkv7Config c = SmallConfig();
  const Rwkv7State s = FilledState(c, 1);
  ASSERT_OK_AND_ASSIGN(RecurrentState r, ExportState(c, s));
  EXPECT_EQ(r.boundary_tokens, 1234u);
  ASSERT_EQ(r.tensors.size(), 9u);
  EXPECT_EQ(r.tensors[0].name, "layers.0.att_shift");
  EXPECT_EQ(r.tensors[1].name, "layers.0.ffn_shift");
  EXPECT_EQ(r.tensors[2].name, "layers.0.wkv_state");
  EXPECT_EQ(r.tensors[8].name, "layers.2.wkv_state");
  EXPECT_EQ(r.tensors[0].shape, (std::vector<uint64_t>{6}));
  EXPECT_EQ(r.tensors[2].shape, (std::vector<uint64_t>{2, 3, 3}));
  EXPECT_EQ(r.tensors[2].dtype, DType::kF32);
  EXPECT_EQ(r.DataBytes(), c.StateScalars() * 4);
  EXPECT_OK(r.Validate());
  // wkv_state element (h, i, j) is float (h * N + i) * N + j, little-endian.
  float v;
  std::memcpy(&v, &r.tensors[5].data[4 * ((1 * 3 + 2) * 3 + 1)], 4);
  EXPECT_EQ(v, s.layers[1].wkv[(1 * 3 + 2) * 3 + 1]);
}

TEST(Rwkv7StateTest, ImportOfExportIsBitExact) {
  const Rwkv7Config c = SmallConfig();
  const Rwkv7State s = FilledState(c, 2);
  ASSERT_OK_AND_ASSIGN(RecurrentState r, ExportState(c, s));
  ASSERT_OK_AND_ASSIGN(Rwkv7State back, ImportState(c, r));
  EXPECT_TRUE(back.BitEqual(s));
  uint32_t bits;
  std::memcpy(&bits, &back.layers[1].wkv[5], 4);
  EXPECT_EQ(bits, 0x7FC01234u);
  EXPECT_TRUE(std::signbit(back.layers[0].att_shift[0]));
}

TEST(Rwkv7StateTest, BitEqualSeesSignOfZeroAndTokenCount) {
  const Rwkv7Config c = SmallConfig();
  Rwkv7State a = Rwkv7State::Zeros(c), b = a;
  EXPECT_TRUE(a.BitEqual(b));
  b.layers[2].wkv[17] = -0.0f;
  EXPECT_FALSE(a.BitEqual(b));
  b = a;
  b.tokens = 1;
  EXPECT_FALSE(a.BitEqual(b));
}

TEST(Rwkv7StateTest, ThroughAStoredStateRecord) {
  const Rwkv7Config c = SmallConfig();
  const Rwkv7State s = FilledState(c, 3);
  ASSERT_OK_AND_ASSIGN(RecurrentState r, ExportState(c, s));
  Digest256 fp{};
  fp[0] = 0xAB;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> record, EncodeStateRecord(r, fp));
  ASSERT_OK_AND_ASSIGN(DecodedStateRecord d, DecodeStateRecord(record));
  EXPECT_EQ(d.model_fingerprint, fp);
  ASSERT_OK_AND_ASSIGN(Rwkv7State back, ImportState(c, d.state));
  EXPECT_TRUE(back.BitEqual(s));
}

TEST(Rwkv7StateTest, ImportAcceptsAnyTensorOrder) {
  const Rwkv7Config c = SmallConfig();
  const Rwkv7State s = FilledState(c, 4);
  ASSERT_OK_AND_ASSIGN(RecurrentState r, ExportState(c, s));
  std::reverse(r.tensors.begin(), r.tensors.end());
  ASSERT_OK_AND_ASSIGN(Rwkv7State back, ImportState(c, r));
  EXPECT_TRUE(back.BitEqual(s));
}

TEST(Rwkv7StateTest, ImportRejectsWrongTensors) {
  const Rwkv7Config c = SmallConfig();
  ASSERT_OK_AND_ASSIGN(const RecurrentState good, ExportState(c, FilledState(c, 5)));
  auto expect_bad = [&](const char* what, auto mutate) {
    RecurrentState r = good;
    mutate(r);
    EXPECT_STATUS(ImportState(c, r), kInvalidArgument) << what;
  };
  expect_bad("missing", [](RecurrentState& r) { r.tensors.pop_back(); });
  expect_bad("extra", [](RecurrentState& r) {
    r.tensors.push_back(r.tensors[0]);
    r.tensors.back().name = "layers.3.att_shift";
  });
  expect_bad("duplicate replaces one", [](RecurrentState& r) { r.tensors[1] = r.tensors[0]; });
  expect_bad("renamed", [](RecurrentState& r) { r.tensors[4].name = "layers.1.conv_state"; });
  expect_bad("dtype", [](RecurrentState& r) {
    r.tensors[2].dtype = DType::kF16;
    r.tensors[2].data.resize(r.tensors[2].data.size() / 2);
  });
  expect_bad("transposed shape", [](RecurrentState& r) { r.tensors[2].shape = {3, 2, 3}; });
  expect_bad("flat shape", [](RecurrentState& r) { r.tensors[2].shape = {18}; });
  expect_bad("short data", [](RecurrentState& r) { r.tensors[0].data.resize(20); });
  EXPECT_STATUS(ImportState(c, RecurrentState{}), kInvalidArgument);
}

TEST(Rwkv7StateTest, ExportRejectsAStateOfAnotherShape) {
  const Rwkv7Config c = SmallConfig();
  Rwkv7State s = Rwkv7State::Zeros(c);
  s.layers.pop_back();
  EXPECT_STATUS(ExportState(c, s), kInvalidArgument);
  s = Rwkv7State::Zeros(c);
  s.layers[1].wkv.push_back(0.0f);
  EXPECT_STATUS(ExportState(c, s), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::rwkv7
