// The AVX2 forms of the predictor's fp32 steps (model/predictor/spec_predictor_avx2.h) against the
// scalar definitions (numerics/det_math.h, numerics/spec_predictor_ops.h): identical
// bits on swept inputs, specials included, and on attention tiles of every shape the
// blocking distinguishes (head_dim a multiple of 8 or not, 64/128 register paths, key
// counts around the 8-key and 64-key blocks, tiles of 1..9 tokens).
#include "model/predictor/spec_predictor_avx2.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvstash/dtype_bits.h"
#include "numerics/det_math.h"
#include "numerics/int8_gemm.h"
#include "numerics/spec_predictor_ops.h"
#include "tests/support/float_sweep.h"

namespace kvstash::model {
namespace {

class PredictorAvx2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!spec::CpuHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2: nothing to compare";
  }
};

using ::kvstash::testing::FloatSweepInputs;

TEST_F(PredictorAvx2Test, DetExpIsBitIdentical) {
  const auto x = FloatSweepInputs();
  std::vector<float> y(x.size());
  avx2::DetExp(x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(Bits(y[i]), Bits(spec::DetExp(x[i]))) << "x bits " << std::hex << Bits(x[i]);
  }
}

TEST_F(PredictorAvx2Test, SiluMulIsBitIdentical) {
  const auto x = FloatSweepInputs();
  std::vector<float> up(x.size());
  std::mt19937 rng(6);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (auto& u : up) u = d(rng);
  std::vector<float> g = x;
  avx2::SiluMul(g.data(), up.data(), g.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = spec::DMul(spec::DetSilu(x[i]), up[i]);
    if (want != want) {
      ASSERT_NE(g[i], g[i]) << i;  // NaN (payloads: see the header)
    } else {
      ASSERT_EQ(Bits(g[i]), Bits(want)) << "x bits " << std::hex << Bits(x[i]);
    }
  }
}

TEST_F(PredictorAvx2Test, AttentionTileMatchesAttentionRow) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (uint32_t hd : {8u, 12u, 64u, 128u}) {
    for (uint32_t heads : {1u, 3u, 5u}) {
      for (uint32_t kv_heads : {1u, 2u}) {
        for (uint32_t n0 : {1u, 7u, 8u, 9u, 63u, 64u, 65u, 130u}) {
          for (uint32_t tokens : {1u, 2u, 8u, 9u}) {
            const size_t stride = static_cast<size_t>(kv_heads) * hd;
            const uint32_t keys = n0 + tokens - 1;
            std::vector<float> k(keys * stride), v(keys * stride),
                q(static_cast<size_t>(tokens) * heads * hd);
            for (auto* t : {&k, &v, &q}) {
              for (auto& x : *t) x = d(rng);
            }
            const float scale = spec::DetRsqrt(static_cast<float>(hd));
            const uint32_t g = kv_heads - 1;  // the last kv head: offsets inside the rows
            std::vector<float> out(q.size(), -1.0f), want(q.size(), -2.0f);
            std::vector<float> scratch(static_cast<size_t>(tokens) * heads * (keys + 8));
            avx2::AttentionTile(q.data(), static_cast<size_t>(heads) * hd, tokens, heads, k.data() + g * hd,
                                v.data() + g * hd, stride, n0, hd, scale, scratch.data(), out.data(),
                                static_cast<size_t>(heads) * hd);
            std::vector<float> row_scratch(keys);
            for (uint32_t t = 0; t < tokens; ++t) {
              for (uint32_t h = 0; h < heads; ++h) {
                const size_t at = (static_cast<size_t>(t) * heads + h) * hd;
                AttentionRow(q.data() + at, k.data() + g * hd, v.data() + g * hd, stride, n0 + t, hd, scale,
                             row_scratch.data(), want.data() + at);
              }
            }
            ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0)
                << "hd=" << hd << " heads=" << heads << " n0=" << n0 << " tokens=" << tokens;
          }
        }
      }
    }
  }
}

TEST_F(PredictorAvx2Test, CanonicalDotIsBitIdentical) {
  std::mt19937 rng(8);
  std::normal_distribution<float> d(0.0f, 10.0f);
  for (uint32_t n : {0u, 1u, 7u, 8u, 9u, 64u, 65u, 576u}) {
    std::vector<float> a(n), b(n);
    for (auto& x : a) x = d(rng);
    for (auto& x : b) x = d(rng);
    EXPECT_EQ(Bits(avx2::CanonicalDot(a.data(), b.data(), n)),
              Bits(CanonicalDotInline(a.data(), b.data(), n)))
        << n;
  }
}

}  // namespace
}  // namespace kvstash::model
