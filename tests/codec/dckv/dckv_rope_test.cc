#include "codec/dckv/dckv_rope.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "model/forward/ops.h"

namespace kvstash::dckv {
namespace {

// The codec's RoPE must equal the runtime's bit for bit (the decoder re-applies it to
// produce the K an engine would have cached).
TEST(DckvRope, MatchesRuntimeBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 3.0f);
  for (uint32_t head_dim : {2u, 8u, 64u}) {
    for (uint32_t pos : {0u, 1u, 5u, 1023u, 70000u}) {
      std::vector<float> a(3 * head_dim);
      for (auto& v : a) v = n01(rng);
      std::vector<float> b = a;
      const auto table = model::RopeTable::Build(pos, 1, head_dim, 100000.0f);
      model::ApplyRope(a.data(), 3, head_dim, table);
      for (uint32_t h = 0; h < 3; ++h) RotateHead(b.data() + h * head_dim, head_dim, pos, 100000.0f, false);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "head_dim " << head_dim << " pos " << pos;
    }
  }
}

// The table form (cos/sin computed once per position range) is bit-identical to
// RotateHead, forward and inverse, for positions inside the range.
TEST(DckvRope, TableMatchesRotateHeadBitForBit) {
  std::mt19937 rng(9);
  std::normal_distribution<float> n01(0.0f, 3.0f);
  for (uint32_t head_dim : {2u, 8u, 64u}) {
    for (uint32_t first : {0u, 4u, 69999u}) {
      const uint32_t count = 37;
      const RopeTable table(head_dim, 10000.0f, first, count);
      for (uint32_t pos : {first, first + 1, first + count - 1}) {
        for (bool inverse : {false, true}) {
          std::vector<float> a(head_dim);
          for (auto& v : a) v = n01(rng);
          std::vector<float> b = a;
          table.Rotate(a.data(), pos, inverse);
          RotateHead(b.data(), head_dim, pos, 10000.0f, inverse);
          EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
              << "head_dim " << head_dim << " pos " << pos << " inverse " << inverse;
        }
      }
    }
  }
}

TEST(DckvRope, InverseUndoesRotation) {
  std::mt19937 rng(8);
  std::normal_distribution<float> n01(0.0f, 3.0f);
  std::vector<float> x(64);
  for (auto& v : x) v = n01(rng);
  std::vector<float> y = x;
  RotateHead(y.data(), 64, 4097, 10000.0f, false);
  EXPECT_GT(std::abs(y[1] - x[1]) + std::abs(y[40] - x[40]), 1e-3f);  // it did rotate
  RotateHead(y.data(), 64, 4097, 10000.0f, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5f) << i;
}

}  // namespace
}  // namespace kvstash::dckv
