// spec on the tiny Qwen3.5 (model/hybrid/hybrid_predictor.h, hybrid_spec.h): the int8
// predictor is deterministic (same bits however the tokens are split, same weights
// digest on every build of the same model) and close to the exact model; the exact
// fp32 KV and recurrent state coded against it round-trip bit for bit through the
// stored forms and continue to the same logits; damaged bytes, another artifact or
// another predictor never restore.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kvstash/payload_format.h"
#include "model/hybrid/hybrid_spec.h"
#include "tests/model/hybrid/tiny_qwen35.h"
#include "tests/support/same_bits.h"

namespace kvstash::hybrid {
namespace {

std::vector<uint32_t> Tokens(uint64_t seed, size_t n, uint32_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = static_cast<uint32_t>(rng() % vocab);
  return t;
}

using ::kvstash::testing::SameBits;

double RelRms(std::span<const float> got, std::span<const float> want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * double(got[i] - want[i]);
    den += want[i] * double(want[i]);
  }
  return std::sqrt(num / den);
}

class HybridSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(model_, kvstash::testing::LoadTinyQwen35());
    ASSERT_OK_AND_ASSIGN(HybridPredictor p, HybridPredictor::Create(*model_, {}));
    predictor_ = std::make_unique<HybridPredictor>(std::move(p));
    std::vector<std::vector<uint32_t>> cal = {Tokens(1, 300, vocab()), Tokens(2, 300, vocab())};
    ASSERT_OK_AND_ASSIGN(spec::SpecStateArtifact a, CalibrateHybridSpec(*model_, *predictor_, cal, 32));
    artifact_ = std::make_unique<spec::SpecStateArtifact>(std::move(a));
  }
  uint32_t vocab() const { return model_->config().vocab_size; }
  HybridState RunModel(std::span<const uint32_t> t) const {
    HybridState s = HybridState::Empty(model_->config());
    EXPECT_OK(model_->EvalSequence(t, &s, {}));
    return s;
  }
  HybridState RunPredictor(std::span<const uint32_t> t) const {
    HybridState s = HybridState::Empty(model_->config());
    EXPECT_OK(predictor_->Eval(t, &s));
    return s;
  }
  // The stored forms of the boundary at t.size(): chunks of `chunk` tokens + state.
  void Encode(std::span<const uint32_t> t, uint32_t chunk, std::vector<std::vector<uint8_t>>* payloads,
              std::vector<uint8_t>* record, uint64_t* raw = nullptr, uint64_t* coded = nullptr) const {
    const HybridState exact = RunModel(t), pred = RunPredictor(t);
    const uint32_t n = static_cast<uint32_t>(t.size());
    payloads->clear();
    for (uint32_t b = 0; b < n; b += chunk) {
      const uint32_t e = std::min(n, b + chunk);
      ASSERT_OK_AND_ASSIGN(auto p,
                           EncodeHybridSpecChunk(*model_, *artifact_, exact, pred, b, e, e - b < chunk));
      payloads->push_back(std::move(p));
    }
    ASSERT_OK_AND_ASSIGN(RecurrentState es, ExportRecurrentState(model_->config(), exact));
    ASSERT_OK_AND_ASSIGN(RecurrentState ps, ExportRecurrentState(model_->config(), pred));
    spec::StateCodingStats st;
    ASSERT_OK_AND_ASSIGN(*record, EncodeHybridSpecState(*model_, *artifact_, es, ps, &st));
    if (raw) *raw = es.DataBytes();
    if (coded) *coded = st.body_bytes;
  }
  std::unique_ptr<HybridModel> model_;
  std::unique_ptr<HybridPredictor> predictor_;
  std::unique_ptr<spec::SpecStateArtifact> artifact_;
};

TEST_F(HybridSpecTest, PredictorIsDeterministicAndCloseToTheModel) {
  const auto t = Tokens(7, 200, vocab());
  const HybridState whole = RunPredictor(t);
  HybridState split = HybridState::Empty(model_->config());
  const size_t cuts[] = {0, 1, 64, 65, 199, 200};  // pieces of 1, 63, 1, 134 and 1 tokens
  for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
    ASSERT_OK(predictor_->Eval(std::span(t).subspan(cuts[i], cuts[i + 1] - cuts[i]), &split));
  }
  for (size_t l = 0; l < whole.layers.size(); ++l) {
    EXPECT_TRUE(SameBits(whole.layers[l].delta, split.layers[l].delta)) << l;
    EXPECT_TRUE(SameBits(whole.layers[l].conv, split.layers[l].conv)) << l;
    EXPECT_TRUE(SameBits(whole.layers[l].keys, split.layers[l].keys)) << l;
  }
  ASSERT_OK_AND_ASSIGN(HybridPredictor again, HybridPredictor::Create(*model_, {}));
  EXPECT_EQ(again.weights_digest(), predictor_->weights_digest());
  ASSERT_OK_AND_ASSIGN(HybridPredictor g64, HybridPredictor::Create(*model_, {.group = 64}));
  EXPECT_NE(g64.weights_digest(), predictor_->weights_digest());
  EXPECT_EQ(HybridPredictor::Create(*model_, {.group = 0}).status().code(), Status::Code::kInvalidArgument);

  // Close (int8 weights) but not equal to the exact model.
  const HybridState exact = RunModel(t);
  for (size_t l = 0; l < exact.layers.size(); ++l) {
    const auto& a = exact.layers[l];
    const auto& p = whole.layers[l];
    if (!a.delta.empty()) {
      const double r = RelRms(p.delta, a.delta);
      std::printf("layer %zu: delta state rel RMS %.4f, conv state %.4f\n", l, r, RelRms(p.conv, a.conv));
      EXPECT_GT(r, 0.0);
      EXPECT_LT(r, 0.1);
    } else {
      const double rk = RelRms(p.keys, a.keys), rv = RelRms(p.values, a.values);
      std::printf("layer %zu: K rel RMS %.4f, V %.4f\n", l, rk, rv);
      EXPECT_GT(rk, 0.0);
      EXPECT_LT(rk, 0.1);
      EXPECT_LT(rv, 0.1);
    }
  }
  EXPECT_EQ(predictor_->Eval(std::vector<uint32_t>{vocab()}, &split).code(), Status::Code::kInvalidArgument);
}

TEST_F(HybridSpecTest, KvAndStateRoundTripExactlyAndContinue) {
  const auto all = Tokens(11, 230, vocab());
  for (uint32_t boundary : {1u, 63u, 64u, 65u, 200u}) {
    SCOPED_TRACE(boundary);
    const auto t = std::span(all).first(boundary);
    std::vector<std::vector<uint8_t>> payloads;
    std::vector<uint8_t> record;
    uint64_t raw = 0, coded = 0;
    Encode(t, 64, &payloads, &record, &raw, &coded);
    ASSERT_OK_AND_ASSIGN(HybridState got,
                         RestoreHybridSpecBoundary(*model_, *predictor_, *artifact_, all, payloads, record));
    const HybridState want = RunModel(t);
    ASSERT_EQ(got.tokens, boundary);
    for (size_t l = 0; l < want.layers.size(); ++l) {
      for (auto m : {&HybridLayerState::conv, &HybridLayerState::delta, &HybridLayerState::keys,
                     &HybridLayerState::values}) {
        EXPECT_TRUE(SameBits(want.layers[l].*m, got.layers[l].*m)) << l;
      }
    }
    // Continuation from the restored boundary equals the uninterrupted run.
    const uint64_t v = vocab();
    std::vector<float> full(all.size() * v), rest((all.size() - boundary) * v);
    HybridState s = HybridState::Empty(model_->config());
    ASSERT_OK(model_->EvalSequence(all, &s, full));
    ASSERT_OK(model_->EvalSequence(std::span(all).subspan(boundary), &got, rest));
    EXPECT_EQ(0, std::memcmp(rest.data(), full.data() + boundary * v, rest.size() * 4));
    if (boundary == 200) {
      std::printf("state at 200: %llu B fp32 -> %llu B coded (%.3f)\n", static_cast<unsigned long long>(raw),
                  static_cast<unsigned long long>(coded), double(coded) / raw);
      EXPECT_LT(coded, raw);  // the predictor leaves fewer bits than the fp32 bytes
    }
  }
}

TEST_F(HybridSpecTest, DamageOrAnotherPredictorNeverRestores) {
  const auto t = Tokens(13, 100, vocab());
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> record;
  Encode(t, 64, &payloads, &record);
  ASSERT_OK(RestoreHybridSpecBoundary(*model_, *predictor_, *artifact_, t, payloads, record).status());
  for (size_t i : {size_t{0}, size_t{140}, record.size() / 2, record.size() - 1}) {
    auto bad = record;
    bad[i] ^= 0x04;
    EXPECT_FALSE(RestoreHybridSpecBoundary(*model_, *predictor_, *artifact_, t, payloads, bad).ok()) << i;
  }
  for (size_t c = 0; c < payloads.size(); ++c) {
    for (size_t i : {size_t{3}, size_t{150}, payloads[c].size() - 1}) {
      auto bad = payloads;
      bad[c][i] ^= 0x20;
      EXPECT_FALSE(RestoreHybridSpecBoundary(*model_, *predictor_, *artifact_, t, bad, record).ok())
          << c << " " << i;
    }
  }
  // Chunks out of order, a prefix that differs, another predictor: Mismatch or Corruption.
  std::vector<std::vector<uint8_t>> swapped = {payloads[1], payloads[0]};
  EXPECT_FALSE(RestoreHybridSpecBoundary(*model_, *predictor_, *artifact_, t, swapped, record).ok());
  auto other = t;
  other[5] = (other[5] + 1) % vocab();
  EXPECT_EQ(
      RestoreHybridSpecBoundary(*model_, *predictor_, *artifact_, other, payloads, record).status().code(),
      Status::Code::kMismatch);
  ASSERT_OK_AND_ASSIGN(HybridPredictor g64, HybridPredictor::Create(*model_, {.group = 64}));
  EXPECT_EQ(RestoreHybridSpecBoundary(*model_, g64, *artifact_, t, payloads, record).status().code(),
            Status::Code::kMismatch);
  EXPECT_EQ(
      RestoreHybridSpecBoundary(*model_, *predictor_, *artifact_, std::span(t).first(50), payloads, record)
          .status()
          .code(),
      Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::hybrid
