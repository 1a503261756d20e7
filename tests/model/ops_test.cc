// Forward-pass steps against hand-derived values.
#include <cmath>

#include "model/forward/attention.h"
#include "model/forward/model.h"
#include "model/forward/ops.h"
#include "tests/model/test_data.h"

namespace kvstash::model {
namespace {

TEST(Ops, RmsNorm) {
  // x = (3, 4): mean(x^2) = 12.5; y = w * x / sqrt(12.5 + eps).
  std::vector<float> x = {3, 4, 0, 0};
  const float w[2] = {1.0f, 2.0f};
  RmsNorm(x.data(), 2, 2, w, 0.0f);
  EXPECT_FLOAT_EQ(x[0], 3.0f / std::sqrt(12.5f));
  EXPECT_FLOAT_EQ(x[1], 8.0f / std::sqrt(12.5f));
}

TEST(Ops, RopeIdentityAtZeroAndRotation) {
  RopeTable t = RopeTable::Build(0, 2, 4, 10000.0f);
  std::vector<float> x = {1, 2, 3, 4, 1, 0, 0, 0};  // [2 positions, 1 head, 4]
  ApplyRope(x.data(), 1, 4, t);
  EXPECT_EQ(x[0], 1);
  EXPECT_EQ(x[3], 4);
  // Position 1, pair (0, 2) with inv_freq 1: (1, 0) -> (cos 1, sin 1).
  EXPECT_FLOAT_EQ(x[4], std::cos(1.0f));
  EXPECT_FLOAT_EQ(x[6], std::sin(1.0f));
  EXPECT_EQ(x[5], 0.0f);
}

TEST(Ops, InterleavedToHalfSplitUndoesLlamaCppPermute) {
  // One head of dim 4, in = 1: interleaved rows (a0, b0, a1, b1) -> (a0, a1, b0, b1).
  const std::vector<float> w = {10, 20, 11, 21};
  EXPECT_EQ(InterleavedToHalfSplit(w, 1, 4, 1), (std::vector<float>{10, 11, 20, 21}));
}

TEST(Ops, CausalAttentionTwoTokens) {
  // head_dim 2, 1 head. q1 attends k0, k1 with equal scores -> mean of v0, v1.
  const std::vector<float> q = {1, 0, 0, 0};
  const std::vector<float> k = {1, 0, 5, 0};
  const std::vector<float> v = {2, 4, 6, 8};
  std::vector<float> out(4), scratch;
  CausalAttention({1, 1, 2, 0, 2}, q.data(), k.data(), v.data(), out.data(), &scratch);
  EXPECT_FLOAT_EQ(out[0], 2);  // token 0 sees only v0
  EXPECT_FLOAT_EQ(out[1], 4);
  EXPECT_FLOAT_EQ(out[2], 4);  // token 1: q = 0 -> uniform over v0, v1
  EXPECT_FLOAT_EQ(out[3], 6);
}

TEST(Ops, SiluMul) {
  float g[2] = {0.0f, 2.0f};
  const float u[2] = {5.0f, 3.0f};
  SiluMul(g, u, 2);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_FLOAT_EQ(g[1], 3.0f * 2.0f / (1.0f + std::exp(-2.0f)));
}

}  // namespace
}  // namespace kvstash::model
