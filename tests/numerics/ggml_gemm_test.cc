// The ggml-q4_1 predictor's SIMD GEMM kernels (numerics/ggml_gemm.h) against the
// scalar reference: the projection
// GemmRowBlock on each path vs DotQ4_1Q8_1 for every (token, row), bit for bit, over
// row counts around the 16-row block and the 8-row AVX2 half (1, 7, 8, 9, 15, 16, 17,
// 33, 50), one to many blocks, token counts around each path's register block, and
// extreme scales and values (fp16 extremes and subnormals for d and m, |q8| = 127 with
// q4 = 15 everywhere: the largest integer sums); padding rows never stored. A path
// the CPU (or KVSTASH_CPU_PATH) lacks prints SKIPPED with the reason.
#include "numerics/ggml_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvstash/dtype_bits.h"
#include "tests/support/test_util.h"

namespace kvstash::model::ggml {
namespace {

// How the weights' and activations' values are drawn.
enum class Values { kRandom, kExtremeScales, kLargestSums };

std::vector<UnpackedQ4_1> RandomWeights(uint32_t rows, uint32_t blocks, Values values, std::mt19937& rng) {
  std::vector<UnpackedQ4_1> w(static_cast<size_t>(rows) * blocks);
  std::uniform_int_distribution<int> nib(0, 15), pick(0, 5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  // fp16 values (d and m are fp16 in the file): the largest, the smallest normal, a
  // subnormal, zero, and ordinary ones.
  const float extremes[] = {65504.0f, -65504.0f, 6.103515625e-5f, 5.9604644775390625e-8f, 0.0f, -1.5f};
  for (UnpackedQ4_1& b : w) {
    for (uint8_t& q : b.q) q = static_cast<uint8_t>(values == Values::kLargestSums ? 15 : nib(rng));
    if (values == Values::kExtremeScales) {
      b.d = extremes[pick(rng)];
      b.m = extremes[pick(rng)];
    } else {
      b.d = F16ToF32(F32ToF16(std::fabs(u(rng)) * 0.01f));
      b.m = F16ToF32(F32ToF16(u(rng) * 0.05f));
    }
  }
  return w;
}

std::vector<BlockQ8_1> RandomActivations(uint32_t tokens, uint32_t blocks, Values values, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(tokens) * blocks * kBlock);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 4);
  const float scales[] = {1e-30f, 1e-6f, 1.0f, 3e3f, 6e4f};
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    const float s = values == Values::kExtremeScales ? scales[pick(rng)] : 1.0f;
    for (uint32_t j = 0; j < kBlock; ++j) {
      // kLargestSums: every element at +-amax, so each q8 is +-127 (one sign per block).
      x[b * kBlock + j] = values == Values::kLargestSums ? ((b & 1) ? -3.0f : 3.0f) : s * g(rng);
    }
  }
  std::vector<BlockQ8_1> out(static_cast<size_t>(tokens) * blocks);
  for (uint32_t t = 0; t < tokens; ++t) {
    const size_t at = static_cast<size_t>(t) * blocks;
    QuantizeRowQ8_1(&x[at * kBlock], blocks * kBlock, &out[at]);
  }
  return out;
}

// Every row block of `path` vs DotQ4_1Q8_1; y keeps a sentinel in its padding columns.
void ExpectScalarBits(GgmlPath path, uint32_t rows, uint32_t blocks, uint32_t tokens, Values values,
                      uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<UnpackedQ4_1> w = RandomWeights(rows, blocks, values, rng);
  const std::vector<BlockQ8_1> x = RandomActivations(tokens, blocks, values, rng);
  PackedQ4_1 packed;
  ASSERT_OK(PackQ4_1(w, rows, blocks, &packed));
  std::vector<float> xd(x.size()), xs(x.size());
  Q8_1Scales(x.data(), x.size(), xd.data(), xs.data());
  const size_t stride = rows + 3;
  constexpr float kSentinel = -12345.0f;
  std::vector<float> y(tokens * stride, kSentinel);
  for (uint32_t rb = 0; rb < packed.row_blocks; ++rb) {
    GemmRowBlock(path, packed, rb, x.data(), xd.data(), xs.data(), tokens, y.data(), stride);
  }
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t o = 0; o < rows; ++o) {
      const float want =
          DotQ4_1Q8_1(&w[static_cast<size_t>(o) * blocks], &x[static_cast<size_t>(t) * blocks], blocks);
      const float got = y[t * stride + o];
      ASSERT_EQ(Bits(got), Bits(want))
          << GgmlPathName(path) << " rows " << rows << " blocks " << blocks << " tokens " << tokens
          << " at t " << t << " o " << o << ": " << got << " vs " << want;
    }
    for (size_t o = rows; o < stride; ++o) ASSERT_EQ(y[t * stride + o], kSentinel) << "padding row stored";
  }
}

class GgmlGemmTest : public ::testing::TestWithParam<spec::GemmBackend> {
 protected:
  void SetUp() override {
    auto path = ResolveGgmlPath(GetParam());
    if (!path.ok()) GTEST_SKIP() << "SKIPPED: " << path.status().ToString();
    path_ = *path;
  }
  GgmlPath path_ = GgmlPath::kScalar;
};

TEST_P(GgmlGemmTest, SweepOfShapesGivesTheScalarBits) {
  uint32_t seed = 1;
  for (uint32_t rows : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 33u, 50u}) {
    for (uint32_t blocks : {1u, 2u, 18u}) {
      for (uint32_t tokens : {1u, 3u, 4u, 5u, 8u, 9u, 13u, 17u}) {
        ExpectScalarBits(path_, rows, blocks, tokens, Values::kRandom, seed++);
      }
    }
  }
  ExpectScalarBits(path_, 40, 48, 11, Values::kRandom, seed++);  // many blocks (an FFN row)
}

TEST_P(GgmlGemmTest, ExtremeScalesGiveTheScalarBits) {
  for (uint32_t seed = 1; seed <= 8; ++seed) ExpectScalarBits(path_, 23, 6, 9, Values::kExtremeScales, seed);
}

TEST_P(GgmlGemmTest, LargestIntegerSumsGiveTheScalarBits) {
  ExpectScalarBits(path_, 17, 48, 9, Values::kLargestSums, 1);
}

INSTANTIATE_TEST_SUITE_P(Paths, GgmlGemmTest,
                         ::testing::Values(spec::GemmBackend::kAvx2, spec::GemmBackend::kAvx512),
                         [](const auto& info) {
                           return std::string(info.param == spec::GemmBackend::kAvx2 ? "Avx2" : "Avx512");
                         });

TEST(GgmlGemmPackTest, RejectsWrongSizes) {
  std::vector<UnpackedQ4_1> w(6);
  PackedQ4_1 p;
  EXPECT_TRUE(PackQ4_1(w, 4, 2, &p).IsInvalidArgument());
  EXPECT_TRUE(PackQ4_1(w, 0, 6, &p).IsInvalidArgument());
  EXPECT_OK(PackQ4_1(w, 3, 2, &p));
  EXPECT_EQ(p.row_blocks, 1u);
}

TEST(GgmlGemmPackTest, ScalarBackendResolvesToScalar) {
  auto path = ResolveGgmlPath(spec::GemmBackend::kScalar);
  ASSERT_OK(path.status());
  EXPECT_EQ(*path, GgmlPath::kScalar);
}

}  // namespace
}  // namespace kvstash::model::ggml
