// Spec state coding on the real trained RWKV-7 (../shared/models) and real text: the
// deterministic predictor's golden state checksum, and the lossless state codec
// calibrated on one licence text and evaluated on another, against the model-free
// byte-plane entropy of the same states (the acceptance: <= 0.75x of it).
// The full measurement is `kvstash-bench codec --codec spec --state`.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "codec/spec/spec_state_artifact.h"
#include "codec/spec/spec_state_codec.h"
#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv7_predictor.h"
#include "model/rwkv7/rwkv_file.h"
#include "model/rwkv7/state_size.h"
#include "tests/support/shared_models.h"
#include "tests/support/test_util.h"

namespace kvstash::rwkv7 {
namespace {

constexpr char kModelFile[] = "tiny-rwkv-7v0-834K-FP32.bin";
constexpr uint32_t kEvery = 256;
constexpr uint32_t kTokens = 2048;

// The first kTokens bytes of a Debian licence text (base-files ships them).
std::vector<uint32_t> Text(const std::string& name) {
  auto b = ReadFileBytes("/usr/share/common-licenses/" + name);
  if (!b.ok() || b->size() < kTokens) return {};
  return std::vector<uint32_t>(b->begin(), b->begin() + kTokens);
}

// States every kEvery tokens from `step` (model or predictor).
template <typename Step>
std::vector<RecurrentState> States(const Rwkv7Config& cfg, const std::vector<uint32_t>& t, Step step) {
  std::vector<RecurrentState> out;
  Rwkv7State s = Rwkv7State::Zeros(cfg);
  for (uint32_t b = 0; b + kEvery <= t.size(); b += kEvery) {
    EXPECT_OK(step(std::span(t).subspan(b, kEvery), &s));
    out.push_back(ExportState(cfg, s).value());
  }
  return out;
}

class Rwkv7StateCodingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSTASH_REQUIRE_SHARED_MODEL(kModelFile);
    cal_ = Text("LGPL-2.1");
    eval_ = Text("GPL-3");
    if (cal_.empty() || eval_.empty()) GTEST_SKIP() << "/usr/share/common-licenses texts missing";
    auto m = Rwkv7Model::Load(testing::SharedModelPath(kModelFile));
    ASSERT_OK(m);
    model_ = std::make_unique<Rwkv7Model>(std::move(m).value());
  }
  std::vector<RecurrentState> Exact(const std::vector<uint32_t>& t) {
    return States(model_->config(), t,
                  [&](std::span<const uint32_t> x, Rwkv7State* s) { return model_->EvalSequence(x, s, {}); });
  }
  std::vector<RecurrentState> Predicted(const Rwkv7Predictor& p, const std::vector<uint32_t>& t) {
    return States(model_->config(), t,
                  [&](std::span<const uint32_t> x, Rwkv7State* s) { return p.Eval(x, s); });
  }
  std::unique_ptr<Rwkv7Model> model_;
  std::vector<uint32_t> cal_, eval_;
};

TEST_F(Rwkv7StateCodingTest, GoldenPredictedStateChecksum) {
  Rwkv7PredictorOptions o;
  o.group = 32;
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor p, Rwkv7Predictor::Create(*model_, o));
  const std::vector<RecurrentState> s = Predicted(p, eval_);
  EXPECT_EQ(s.back().ContentChecksum(), 0x521241b4ebdaca32ull)
      << "0x" << std::hex << s.back().ContentChecksum();
}

TEST_F(Rwkv7StateCodingTest, LosslessAndUnderThreeQuartersOfTheByteplaneBaseline) {
  Rwkv7PredictorOptions o;
  o.group = 32;
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor p, Rwkv7Predictor::Create(*model_, o));
  const std::vector<RecurrentState> cal_exact = Exact(cal_), cal_pred = Predicted(p, cal_);
  const std::vector<RecurrentState> ev_exact = Exact(eval_), ev_pred = Predicted(p, eval_);
  std::vector<spec::StateCalibrationPair> pairs;
  for (size_t i = 0; i < cal_exact.size(); ++i) pairs.push_back({&cal_exact[i], &cal_pred[i]});
  ASSERT_OK_AND_ASSIGN(spec::SpecStateArtifact art, spec::CalibrateSpecState(pairs));

  double coded = 0.0, baseline = 0.0, raw = 0.0;
  for (size_t i = 0; i < ev_exact.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, spec::EncodeSpecState(art, ev_exact[i], ev_pred[i]));
    ASSERT_OK_AND_ASSIGN(RecurrentState back, spec::DecodeSpecState(art, body, ev_pred[i]));
    ASSERT_EQ(back, ev_exact[i]) << "boundary " << (i + 1) * kEvery;
    ASSERT_OK_AND_ASSIGN(auto parts, MeasureStateParts(ev_exact[i], 1));
    coded += body.size();
    baseline += parts.back().byteplane_bytes;
    raw += parts.back().raw_bytes;
  }
  std::printf("int8-g32 state coding: %.3f of raw, %.3f of byte-plane entropy (%.3f of raw)\n", coded / raw,
              coded / baseline, baseline / raw);
  EXPECT_LT(coded, 0.75 * baseline);

  // A decoder whose predictor differs (another group size) gets Mismatch.
  Rwkv7PredictorOptions o2;
  o2.group = 16;
  ASSERT_OK_AND_ASSIGN(Rwkv7Predictor p2, Rwkv7Predictor::Create(*model_, o2));
  const std::vector<RecurrentState> other =
      Predicted(p2, std::vector<uint32_t>(eval_.begin(), eval_.begin() + kEvery));
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, spec::EncodeSpecState(art, ev_exact[0], ev_pred[0]));
  EXPECT_STATUS(spec::DecodeSpecState(art, body, other[0]), kMismatch);
}

}  // namespace
}  // namespace kvstash::rwkv7
