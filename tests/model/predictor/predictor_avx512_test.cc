// The AVX-512 forms of the predictor's attention tile and SiLU
// (model/predictor/spec_predictor_avx512.h) against the scalar definitions
// (numerics/det_math.h, numerics/spec_predictor_ops.h) and the AVX2 forms:
// identical bits on swept inputs, specials included, and on attention tiles of every
// shape the blocking distinguishes (head_dim a multiple of 8 or not, the 64/128 register
// paths and the generic one, odd row counts so a row has no partner, key counts around
// the 8-key, 16-lane and 64-key blocks, tiles of 1..9 tokens, huge values giving Inf
// and NaN scores). Prints SKIPPED on a CPU without AVX-512 (or with
// KVSTASH_CPU_PATH=avx2 / scalar).
#include "model/predictor/spec_predictor_avx512.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvstash/dtype_bits.h"
#include "model/predictor/spec_predictor_avx2.h"
#include "numerics/det_math.h"
#include "numerics/int8_gemm.h"
#include "numerics/spec_predictor_ops.h"
#include "tests/support/float_sweep.h"

namespace kvstash::model {
namespace {

class PredictorAvx512Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!spec::CpuHasAvx512()) {
      GTEST_SKIP() << "this CPU has no AVX-512 F/BW/DQ/VL/VNNI (or KVSTASH_CPU_PATH forbids it): "
                      "nothing to compare";
    }
  }
};

using ::kvstash::testing::FloatSweepInputs;

TEST_F(PredictorAvx512Test, DetExpIsBitIdentical) {
  const auto x = FloatSweepInputs();
  std::vector<float> y(x.size());
  avx512::DetExp(x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(Bits(y[i]), Bits(spec::DetExp(x[i]))) << "x bits " << std::hex << Bits(x[i]);
  }
}

TEST_F(PredictorAvx512Test, SiluMulIsBitIdentical) {
  const auto x = FloatSweepInputs();
  std::vector<float> up(x.size());
  std::mt19937 rng(6);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (auto& u : up) u = d(rng);
  std::vector<float> g = x, g2 = x;
  avx512::SiluMul(g.data(), up.data(), g.size());
  avx2::SiluMul(g2.data(), up.data(), g2.size());
  ASSERT_EQ(std::memcmp(g.data(), g2.data(), g.size() * sizeof(float)), 0) << "AVX-512 and AVX2 differ";
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = spec::DMul(spec::DetSilu(x[i]), up[i]);
    if (want != want) {
      ASSERT_NE(g[i], g[i]) << i;  // NaN (payloads: see the header)
    } else {
      ASSERT_EQ(Bits(g[i]), Bits(want)) << "x bits " << std::hex << Bits(x[i]);
    }
  }
}

// One tile through AVX-512, AVX2 and AttentionRow; all three must agree bit for bit.
void CheckTile(uint32_t hd, uint32_t heads, uint32_t kv_heads, uint32_t n0, uint32_t tokens, float spread,
               std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, spread);
  const size_t stride = static_cast<size_t>(kv_heads) * hd;
  const uint32_t keys = n0 + tokens - 1;
  std::vector<float> k(keys * stride), v(keys * stride), q(static_cast<size_t>(tokens) * heads * hd);
  for (auto* t : {&k, &v, &q}) {
    for (auto& x : *t) x = d(rng);
  }
  const float scale = spec::DetRsqrt(static_cast<float>(hd));
  const uint32_t g = kv_heads - 1;  // the last kv head: offsets inside the rows
  const size_t ts = static_cast<size_t>(heads) * hd;
  std::vector<float> out(q.size(), -1.0f), out2(q.size(), -3.0f), want(q.size(), -2.0f);
  std::vector<float> scratch(static_cast<size_t>(tokens) * heads * (keys + 8));
  avx512::AttentionTile(q.data(), ts, tokens, heads, k.data() + g * hd, v.data() + g * hd, stride, n0, hd,
                        scale, scratch.data(), out.data(), ts);
  avx2::AttentionTile(q.data(), ts, tokens, heads, k.data() + g * hd, v.data() + g * hd, stride, n0, hd,
                      scale, scratch.data(), out2.data(), ts);
  std::vector<float> row_scratch(keys);
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t h = 0; h < heads; ++h) {
      const size_t at = (static_cast<size_t>(t) * heads + h) * hd;
      AttentionRow(q.data() + at, k.data() + g * hd, v.data() + g * hd, stride, n0 + t, hd, scale,
                   row_scratch.data(), want.data() + at);
    }
  }
  ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0)
      << "vs AttentionRow: hd=" << hd << " heads=" << heads << " n0=" << n0 << " tokens=" << tokens
      << " spread=" << spread;
  ASSERT_EQ(std::memcmp(out.data(), out2.data(), out.size() * sizeof(float)), 0)
      << "vs AVX2: hd=" << hd << " heads=" << heads << " n0=" << n0 << " tokens=" << tokens;
}

TEST_F(PredictorAvx512Test, AttentionTileMatchesAttentionRowAndAvx2) {
  std::mt19937 rng(7);
  int cases = 0;
  for (uint32_t hd : {8u, 12u, 16u, 24u, 64u, 72u, 128u}) {
    for (uint32_t heads : {1u, 2u, 3u, 5u}) {
      for (uint32_t kv_heads : {1u, 2u}) {
        for (uint32_t n0 : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 64u, 65u, 130u}) {
          for (uint32_t tokens : {1u, 2u, 3u, 8u, 9u}) {
            CheckTile(hd, heads, kv_heads, n0, tokens, 3.0f, rng);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 3000);
}

TEST_F(PredictorAvx512Test, AttentionTileOnHugeValues) {
  // Scores that overflow to +-Inf (NaN softmax rows) and extreme but finite ones.
  std::mt19937 rng(9);
  for (float spread : {1e3f, 1e18f, 1e30f}) {
    for (uint32_t hd : {64u, 24u}) {
      for (uint32_t n0 : {1u, 9u, 70u}) {
        CheckTile(hd, 3, 1, n0, 8, spread, rng);
        CheckTile(hd, 1, 2, n0, 3, spread, rng);
      }
    }
  }
}

}  // namespace
}  // namespace kvstash::model
