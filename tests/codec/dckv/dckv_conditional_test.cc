// The conditional entropy models: ridge fit against closed forms, hand-derived
// predictions, and the codec's exact round trip with token ids and the checkerboard.
#include "codec/dckv/dckv_conditional.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <random>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_ridge.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

constexpr Digest256 kModel = {4, 5, 6};

TEST(DckvRidge, OneFeatureMatchesClosedForm) {
  // F = 1..4, Y = 2F + 1. Centred: Sxx = 5, Sxy = 10; lambda = rel * Sxx / 1.
  Eigen::MatrixXf f(4, 1), y(4, 1);
  f << 1, 2, 3, 4;
  y << 3, 5, 7, 9;
  ASSERT_OK_AND_ASSIGN(auto b0, FitRidge(f, y, 0.0));
  EXPECT_NEAR(b0(0, 0), 2.0, 1e-9);
  EXPECT_NEAR(b0(1, 0), 1.0, 1e-9);
  // rel = 1: slope 10 / (5 + 5) = 1, bias mean(Y) - mean(F) * 1 = 6 - 2.5.
  ASSERT_OK_AND_ASSIGN(auto b1, FitRidge(f, y, 1.0));
  EXPECT_NEAR(b1(0, 0), 1.0, 1e-9);
  EXPECT_NEAR(b1(1, 0), 3.5, 1e-9);
}

TEST(DckvRidge, MatchesAugmentedLeastSquares) {
  // Independent reference: the penalised problem as ordinary least squares on the
  // augmented system [X; sqrt(lambda) D] B = [Y; 0], solved by QR in fp64.
  std::mt19937 rng(3);
  std::normal_distribution<float> n01;
  const int n = 57, f = 6, m = 3;
  Eigen::MatrixXf x(n, f), y(n, m);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < f; ++j) x(i, j) = n01(rng) + 0.5f * j;
    for (int j = 0; j < m; ++j) y(i, j) = n01(rng) + x(i, j) - 2.0f * x(i, j + 1);
  }
  const double rel = 0.3;
  ASSERT_OK_AND_ASSIGN(auto b, FitRidge(x, y, rel));
  Eigen::MatrixXd xc = x.cast<double>();
  xc.rowwise() -= xc.colwise().mean();
  const double lambda = rel * (xc.transpose() * xc).trace() / f;
  Eigen::MatrixXd aug = Eigen::MatrixXd::Zero(n + f, f + 1);
  aug.topLeftCorner(n, f) = x.cast<double>();
  aug.block(0, f, n, 1).setOnes();
  aug.bottomLeftCorner(f, f) = std::sqrt(lambda) * Eigen::MatrixXd::Identity(f, f);
  Eigen::MatrixXd rhs = Eigen::MatrixXd::Zero(n + f, m);
  rhs.topRows(n) = y.cast<double>();
  const Eigen::MatrixXd ref = aug.colPivHouseholderQr().solve(rhs);
  EXPECT_LT((b - ref).cwiseAbs().maxCoeff(), 1e-4) << b << "\n" << ref;
}

TEST(DckvRidge, BadInput) {
  Eigen::MatrixXf f(0, 2), y(0, 1);
  EXPECT_STATUS(FitRidge(f, y, 0.1), kInvalidArgument);
  Eigen::MatrixXf f2(3, 1), y2(2, 1);
  f2.setOnes();
  y2.setOnes();
  EXPECT_STATUS(FitRidge(f2, y2, 0.1), kInvalidArgument);
  y2.resize(3, 1);
  y2.setOnes();
  EXPECT_STATUS(FitRidge(f2, y2, -1.0), kInvalidArgument);
}

TEST(DckvConditional, HandDerivedPredictions) {
  DckvGroup g;
  g.step = {1.0f, 1.0f};  // n_active = 2, rank 1
  g.context_inputs = 2;
  g.token_map = {1.0f, 2.0f,    // z_0 row
                 0.5f, -1.0f};  // bias
  const std::vector<float> z = {2.0f};
  std::vector<float> mu(2);
  PredictTokenMean(g, 1, z, mu);
  EXPECT_EQ(mu, (std::vector<float>{2.5f, 3.0f}));
  // Context rows: n_0, n_1, z_0, bias.
  g.context_map = {1.0f, 0.0f, 0.0f, 0.5f, 0.25f, 0.0f, -1.0f, 1.0f};
  const std::vector<float> prev = {2.0f, 4.0f}, next = {4.0f, 0.0f};
  PredictContextMean(g, 1, prev, next, z, mu);  // n = (3, 2)
  EXPECT_EQ(mu, (std::vector<float>{-1.0f + 3.0f + 0.5f, 1.0f + 1.0f}));
  PredictContextMean(g, 1, prev, {}, z, mu);  // n = prev
  EXPECT_EQ(mu, (std::vector<float>{-1.0f + 2.0f + 0.5f, 1.0f + 2.0f}));
}

DckvArtifact ConditionedArtifact(double ratio, bool checkerboard) {
  const auto rows = testing::MakeConditionedRows(1200, 0);
  DckvFitOptions fo;
  fo.embed_rank = testing::kEmbedDim;
  auto basis = FitDckvBasis(rows, 2, fo);
  EXPECT_TRUE(basis.ok()) << basis.status().ToString();
  DckvRateOptions o;
  o.target_ratio = ratio;
  o.raw_head = 2;
  o.raw_tail = 3;
  o.checkerboard = checkerboard;
  auto a = MakeDckvArtifact(*basis, o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(*a);
}

TEST(DckvConditional, ArtifactCarriesTheModels) {
  const auto a = ConditionedArtifact(8.0, true);
  EXPECT_EQ(a.conditioning.rank, testing::kEmbedDim);
  EXPECT_EQ(a.conditioning.vocab, testing::kVocab);
  for (const auto& g : a.groups) {
    EXPECT_EQ(g.token_map.size(), (testing::kEmbedDim + 1) * g.n_active());
    EXPECT_EQ(g.context_inputs, g.n_active());  // fewer than 128 components
    EXPECT_EQ(g.context_map.size(), (g.context_inputs + testing::kEmbedDim + 1) * g.n_active());
  }
  const auto bytes = a.Serialize();
  ASSERT_OK_AND_ASSIGN(auto b, DckvArtifact::Parse(bytes));
  EXPECT_EQ(b.Serialize(), bytes);
  EXPECT_EQ(b.Digest(), a.Digest());
  EXPECT_TRUE(ConditionedArtifact(8.0, false).groups[0].context_map.empty());
}

// Symbols, token ids and raw rows round-trip exactly through the payload; Decode
// equals the encoder's reconstruction. Chunk sizes 1, 2, odd, even.
TEST(DckvConditional, RoundTripIsExact) {
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(ConditionedArtifact(6.0, true)));
  const auto eval = testing::MakeConditionedRows(120, 1);
  for (uint32_t len : {1u, 2u, 7u, 8u, 33u}) {
    for (uint32_t offset : {0u, 1u, 40u}) {
      const auto chunk = testing::MakeChunk(eval, offset, offset + len, DType::kBF16);
      const std::span<const uint32_t> ids(eval.tokens.data() + offset, len);
      ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), ids, offset, 120));
      ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), ids, offset, 120, kModel));
      uint32_t got_offset = 0;
      ASSERT_OK_AND_ASSIGN(auto parsed, codec.ParsePayload(payload, kModel, &got_offset));
      EXPECT_EQ(got_offset, offset);
      EXPECT_EQ(parsed.symbols, q.symbols);
      EXPECT_EQ(parsed.token_ids, q.token_ids);
      EXPECT_EQ(parsed.token_ids.size(), q.coded_rows());
      EXPECT_EQ(parsed.raw_bf16, q.raw_bf16);
      ASSERT_OK_AND_ASSIGN(auto rec, codec.Reconstruct(q, offset));
      ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
      EXPECT_EQ(decoded.data, rec.data) << len << " " << offset;
    }
  }
}

// With the token ids the payload is smaller than without (z = 0) on the same
// artifact; both decode. With the checkerboard model the odd rows' symbols are
// smaller than the even rows' (the slow factor is predicted from the neighbours).
TEST(DckvConditional, ConditioningSavesBytes) {
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(ConditionedArtifact(24.0, true)));
  const auto eval = testing::MakeConditionedRows(100, 2);
  const auto chunk = testing::MakeChunk(eval, 0, 100, DType::kBF16);
  const std::span<const uint32_t> ids(eval.tokens.data(), 100);
  ASSERT_OK_AND_ASSIGN(auto with, codec.Encode(chunk.view(), ids, 0, 100, kModel));
  ASSERT_OK_AND_ASSIGN(auto without, codec.Encode(chunk.view(), 0, 100, kModel));
  EXPECT_LT(with.size() * 10, without.size() * 9) << with.size() << " vs " << without.size();
  ASSERT_OK(codec.Decode(with, kModel).status());
  ASSERT_OK(codec.Decode(without, kModel).status());
  ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), ids, 0, 100));
  const size_t per_row = codec.artifact().ActiveComponents();
  double even = 0, odd = 0;
  for (size_t r = 0; r < q.coded_rows(); ++r) {
    for (size_t i = 0; i < per_row; ++i) {
      (r % 2 ? odd : even) += std::abs(static_cast<int16_t>(q.symbols[r * per_row + i]));
    }
  }
  EXPECT_LT(odd, 0.8 * even) << odd << " vs " << even;
}

TEST(DckvConditional, BadTokenIds) {
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(ConditionedArtifact(6.0, true)));
  const auto eval = testing::MakeConditionedRows(10, 3);
  const auto chunk = testing::MakeChunk(eval, 0, 10, DType::kBF16);
  std::vector<uint32_t> ids(eval.tokens.begin(), eval.tokens.begin() + 10);
  EXPECT_STATUS(codec.Encode(chunk.view(), std::span(ids).first(9), 0, 10, kModel), kInvalidArgument);
  ids[5] = testing::kVocab;
  EXPECT_STATUS(codec.Encode(chunk.view(), ids, 0, 10, kModel), kInvalidArgument);
  // A token id outside the vocabulary in a payload is Corruption.
  ids[5] = 1;
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), ids, 0, 10, kModel));
  auto bad = payload;
  // Body: 136-byte header, 5 u32 fields, then u16 ids of the coded rows (row 2 on).
  bad[136 + 20] = 0xFF;
  bad[136 + 21] = 0xFF;
  EXPECT_STATUS(codec.Decode(bad, kModel), kCorruption);
}

// The reference of PredictRows, written from dckv_conditional.h's definition: bias,
// then j ascending, each non-zero term's product rounded to fp32, then the sum.
std::vector<float> PredictRowsByDefinition(const std::vector<float>& map, uint32_t inputs, uint32_t na,
                                           const std::vector<float>& u, uint32_t count) {
  std::vector<float> mu(static_cast<size_t>(count) * na);
  for (uint32_t b = 0; b < count; ++b) {
    for (uint32_t i = 0; i < na; ++i) {
      float acc = map[static_cast<size_t>(inputs) * na + i];
      for (uint32_t j = 0; j < inputs; ++j) {
        const float v = u[static_cast<size_t>(b) * inputs + j];
        if (v == 0.0f) continue;
        acc = acc + v * map[static_cast<size_t>(j) * na + i];  // -ffp-contract=off: no FMA
      }
      mu[static_cast<size_t>(b) * na + i] = acc;
    }
  }
  return mu;
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

// Every ISA path of PredictRows equals the definition bit for bit: the AVX-512 tiles
// (1 to 8 rows, 32 columns with a masked tail), the AVX2 tiles (1 to 4 rows, 16
// columns, portable tail) and the portable loop, over every row count 0..17, widths
// around the tile edges and 0, 11 and 130 inputs. Skipped terms: a third of u is +0 or
// -0, and input 1 is zero in every row while its map row is +inf, so a term that is not
// skipped turns its lanes into NaN (0 * inf); a bias of -0 in every 7th lane stays -0
// where the row's terms are all skipped (adding a +0 product would give +0), which
// row 0 is. Nothing is written past count rows (sentinels).
TEST(DckvConditional, PredictRowsEveryPathEqualsDefinitionBitForBit) {
  std::vector<SynthesisPath> paths = {SynthesisPath::kPortable};
  if (SynthesisHasAvx2()) paths.push_back(SynthesisPath::kAvx2);
  if (SynthesisHasAvx512()) paths.push_back(SynthesisPath::kAvx512);
  std::mt19937 rng(77);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  constexpr size_t kPad = 40;
  constexpr float kSentinel = 123.0f;
  for (uint32_t inputs : {0u, 11u, 130u}) {
    for (uint32_t na : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 48u, 613u}) {
      for (uint32_t count = 0; count <= 17; ++count) {
        std::vector<float> map(static_cast<size_t>(inputs + 1) * na), u(static_cast<size_t>(count) * inputs);
        for (auto& v : map) v = n01(rng);
        for (auto& v : u) v = n01(rng);
        for (size_t t = 0; t < u.size(); t += 3) u[t] = (t % 2 == 0) ? 0.0f : -0.0f;
        for (uint32_t i = 0; i < na; i += 7) map[static_cast<size_t>(inputs) * na + i] = -0.0f;  // bias -0
        if (inputs > 1) {
          for (uint32_t i = 0; i < na; ++i) map[na + i] = std::numeric_limits<float>::infinity();
          for (uint32_t b = 0; b < count; ++b)
            u[static_cast<size_t>(b) * inputs + 1] = (b % 2) ? 0.0f : -0.0f;
        }
        for (uint32_t j = 0; j < inputs && count > 0; ++j)
          u[j] = (j % 2) ? 0.0f : -0.0f;  // row 0: all skipped
        const std::vector<float> want = PredictRowsByDefinition(map, inputs, na, u, count);
        if (count > 0) ASSERT_EQ(std::bit_cast<uint32_t>(want[0]), 0x80000000u);
        for (SynthesisPath path : paths) {
          std::vector<float> got(want.size() + kPad, kSentinel);
          PredictRows(map, inputs, na, u, count, got, path);
          const std::vector<float> tail(got.begin() + static_cast<ptrdiff_t>(want.size()), got.end());
          got.resize(want.size());
          EXPECT_EQ(Bits(got), Bits(want))
              << inputs << " inputs, " << na << " x " << count << " path " << static_cast<int>(path);
          EXPECT_EQ(tail, std::vector<float>(kPad, kSentinel))
              << "wrote past the rows: " << na << " x " << count;
        }
      }
    }
  }
  if (!SynthesisHasAvx512()) {
    GTEST_SKIP() << "AVX-512 path SKIPPED: no AVX-512 F/BW/DQ/VL on this CPU (or KVSTASH_CPU_PATH forbids "
                    "it); checked: portable"
                 << (SynthesisHasAvx2() ? ", AVX2" : " (AVX2 SKIPPED too)");
  }
}

// The batched form equals the one-row functions bit for bit (the decoder's passes use
// it; the entropy-coded round trip across builds relies on it), zeros in u skipped.
TEST(DckvConditional, BatchedRowsEqualOneRowBitForBit) {
  std::mt19937 rng(21);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (uint32_t na : {1u, 7u, 8u, 9u, 37u}) {
    const uint32_t rank = 5, k = 3;
    DckvGroup g;
    g.step.assign(na, 1.0f);
    g.token_map.resize(static_cast<size_t>(rank + 1) * na);
    g.context_inputs = k;
    g.context_map.resize(static_cast<size_t>(k + rank + 1) * na);
    for (auto& v : g.token_map) v = n01(rng);
    for (auto& v : g.context_map) v = n01(rng);
    for (uint32_t count : {1u, 3u, 8u}) {
      std::vector<float> z(static_cast<size_t>(count) * rank), prev(static_cast<size_t>(count) * na),
          next(prev.size());
      for (auto& v : z) v = n01(rng);
      for (auto& v : prev) v = n01(rng);
      for (auto& v : next) v = n01(rng);
      z[0] = 0.0f;
      prev[1 % na] = 0.0f;
      std::vector<float> mu_a(static_cast<size_t>(count) * na), mu_b(mu_a.size());
      PredictRows(g.token_map, rank, na, z, count, mu_a);
      std::vector<float> u(static_cast<size_t>(count) * (k + rank));
      for (uint32_t b = 0; b < count; ++b) {
        for (uint32_t j = 0; j < k; ++j)
          u[b * (k + rank) + j] = 0.5f * (prev[b * na + j % na] + next[b * na + j % na]);
        std::copy_n(z.begin() + b * rank, rank, u.begin() + b * (k + rank) + k);
      }
      PredictRows(g.context_map, k + rank, na, u, count, mu_b);
      for (uint32_t b = 0; b < count; ++b) {
        std::vector<float> one(na), ctx(na);
        const std::span<const float> zb(z.data() + b * rank, rank);
        PredictTokenMean(g, rank, zb, one);
        std::vector<float> pb(k), nb(k);
        for (uint32_t j = 0; j < k; ++j) pb[j] = prev[b * na + j % na], nb[j] = next[b * na + j % na];
        PredictContextMean(g, rank, pb, nb, zb, ctx);
        EXPECT_EQ(0, std::memcmp(one.data(), mu_a.data() + b * na, na * sizeof(float))) << na << " " << count;
        EXPECT_EQ(0, std::memcmp(ctx.data(), mu_b.data() + b * na, na * sizeof(float))) << na << " " << count;
      }
    }
  }
}

}  // namespace
}  // namespace kvstash::dckv
