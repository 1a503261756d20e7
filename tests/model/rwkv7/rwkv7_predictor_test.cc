// The deterministic RWKV-7 predictor (model/rwkv7/rwkv7_predictor.h) on the committed
// synthetic fixture: golden state checksums (the same bits on every machine that runs
// CI), invariance to how the tokens are batched, closeness to the fp32 reference, and
// argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv7_predictor.h"
#include "tests/model/rwkv7/test_files.h"
#include "tests/support/test_util.h"

namespace kvstash::rwkv7 {
namespace {

Rwkv7PredictorOptions Opts(Rwkv7WeightFormat f, int group = 4) {
  Rwkv7PredictorOptions o;
  o.format = f;
  o.group = group;
  return o;
}

// max |a - b| / max |b| over the whole state.
double RelativeError(const Rwkv7State& a, const Rwkv7State& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (auto m : {&Rwkv7LayerState::att_shift, &Rwkv7LayerState::ffn_shift, &Rwkv7LayerState::wkv}) {
      const std::vector<float>& x = a.layers[l].*m;
      const std::vector<float>& y = b.layers[l].*m;
      for (size_t i = 0; i < x.size(); ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
      }
    }
  }
  return diff / scale;
}

class Rwkv7PredictorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Rwkv7Model::Load(testing::SyntheticModelPath());
    ASSERT_OK(m);
    model_ = std::make_unique<Rwkv7Model>(std::move(m).value());
  }
  Rwkv7State Run(const Rwkv7Predictor& p) {
    Rwkv7State s = Rwkv7State::Zeros(p.config());
    EXPECT_OK(p.Eval(testing::SyntheticTokens(), &s));
    return s;
  }
  std::unique_ptr<Rwkv7Model> model_;
};

// Golden checksums of the predicted state after SyntheticTokens(): computed once on
// x86-64 (g++ 12, -ffp-contract=off); any machine or compiler that changes one bit of
// the predictor's arithmetic fails here.
TEST_F(Rwkv7PredictorTest, GoldenStateChecksums) {
  const struct {
    Rwkv7PredictorOptions o;
    uint64_t checksum;
  } cases[] = {{Opts(Rwkv7WeightFormat::kInt8, 4), 0x3160e3c6022672c1ull},
               {Opts(Rwkv7WeightFormat::kInt8, 3), 0x2e44e3fb8c6e0a25ull},
               {Opts(Rwkv7WeightFormat::kBf16), 0xb62916802960ecc4ull},
               {Opts(Rwkv7WeightFormat::kFp16), 0xe5ec4072bc5b7e16ull},
               {Opts(Rwkv7WeightFormat::kFp32), 0x3635377bfefbc8d7ull}};
  for (const auto& c : cases) {
    ASSERT_OK_AND_ASSIGN(Rwkv7Predictor p, Rwkv7Predictor::Create(*model_, c.o));
    ASSERT_OK_AND_ASSIGN(RecurrentState s, ExportState(p.config(), Run(p)));
    EXPECT_EQ(s.ContentChecksum(), c.checksum) << c.o.Name() << ": 0x" << std::hex << s.ContentChecksum();
  }
}

TEST_F(Rwkv7PredictorTest, BatchingDoesNotChangeBits) {
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor p, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8)));
  const std::vector<uint32_t>& t = testing::SyntheticTokens();
  const Rwkv7State whole = Run(p);
  for (size_t split : {size_t{0}, size_t{1}, size_t{5}, t.size() - 1, t.size()}) {
    Rwkv7State s = Rwkv7State::Zeros(p.config());
    ASSERT_OK(p.Eval(std::span(t).first(split), &s));
    ASSERT_OK(p.Eval(std::span(t).subspan(split), &s));
    EXPECT_TRUE(s.BitEqual(whole)) << split;
  }
  Rwkv7State s = Rwkv7State::Zeros(p.config());
  for (uint32_t tok : t) ASSERT_OK(p.Eval(std::span(&tok, 1), &s));
  EXPECT_TRUE(s.BitEqual(whole));
  EXPECT_EQ(whole.tokens, t.size());
}

TEST_F(Rwkv7PredictorTest, TracksTheReferenceState) {
  Rwkv7State ref = Rwkv7State::Zeros(model_->config());
  ASSERT_OK(model_->EvalSequence(testing::SyntheticTokens(), &ref, {}));
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor fp32, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kFp32)));
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor int8, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8)));
  const double e32 = RelativeError(Run(fp32), ref);
  const double e8 = RelativeError(Run(int8), ref);
  std::printf("relative state error vs fp32 reference: fp32-det %.3g, int8-g4 %.3g\n", e32, e8);
  EXPECT_LT(e32, 1e-5);  // only exp/tanh differ (DetExp vs libm, a few ulp)
  EXPECT_LT(e8, 5e-2);
  EXPECT_GT(e8, e32);
}

TEST_F(Rwkv7PredictorTest, WeightsDigestAndSize) {
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor a, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8, 4)));
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor b, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8, 3)));
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor c, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kBf16)));
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor d, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kFp32)));
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor a2, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8, 4)));
  EXPECT_EQ(a.weights_digest(), a2.weights_digest());
  EXPECT_NE(a.weights_digest(), b.weights_digest());
  EXPECT_NE(c.weights_digest(), d.weights_digest());
  EXPECT_LT(c.weight_bytes(), d.weight_bytes());
  EXPECT_EQ(a.options().Name(), "int8-g4");
  EXPECT_EQ(c.options().Name(), "bf16");
}

TEST_F(Rwkv7PredictorTest, Errors) {
  EXPECT_STATUS(Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8, 0)), kInvalidArgument);
  EXPECT_STATUS(Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8, 4097)), kInvalidArgument);
  EXPECT_STATUS(Rwkv7Predictor::Create(*model_, Opts(static_cast<Rwkv7WeightFormat>(9))), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor p, Rwkv7Predictor::Create(*model_, Opts(Rwkv7WeightFormat::kInt8)));
  Rwkv7State s = Rwkv7State::Zeros(p.config());
  const std::vector<uint32_t> bad = {1, 16};
  EXPECT_STATUS(p.Eval(bad, &s), kInvalidArgument);
  EXPECT_TRUE(s.BitEqual(Rwkv7State::Zeros(p.config())));  // untouched
  s.layers.pop_back();
  const std::vector<uint32_t> ok = {1};
  EXPECT_STATUS(p.Eval(ok, &s), kInvalidArgument);
  EXPECT_STATUS(p.Eval(ok, nullptr), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::rwkv7
