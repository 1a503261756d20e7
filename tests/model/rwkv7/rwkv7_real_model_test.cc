// The real trained RWKV-7 (rwkv.cpp's tiny-rwkv-7v0-834K, FP32) from ../shared/models:
// reference logits, exact continuation from exported state, state record round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvstash/payload_format.h"
#include "model/rwkv7/rwkv7_model.h"
#include "tests/model/rwkv7/test_files.h"
#include "tests/support/shared_models.h"
#include "tests/support/test_util.h"

namespace kvstash::rwkv7 {
namespace {

constexpr char kModelFile[] = "tiny-rwkv-7v0-834K-FP32.bin";
constexpr char kLogitsFile[] = "expected-logits-7v0-834K.bin";
// Public-domain English (Dickens, A Tale of Two Cities, 1859), as bytes.
constexpr char kText[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness";

std::vector<uint32_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

class RealRwkv7Test : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSTASH_REQUIRE_SHARED_MODEL(kModelFile);
    auto m = Rwkv7Model::Load(testing::SharedModelPath(kModelFile));
    ASSERT_OK(m);
    model_ = std::make_unique<Rwkv7Model>(std::move(m).value());
  }
  const Rwkv7Model& model() const { return *model_; }

  std::unique_ptr<Rwkv7Model> model_;
};

TEST_F(RealRwkv7Test, ConfigIsReadFromTheWeights) {
  const Rwkv7Config& c = model().config();
  EXPECT_EQ(c.n_vocab, 256u);
  EXPECT_EQ(c.n_embd, 64u);
  EXPECT_EQ(c.n_layer, 12u);
  EXPECT_EQ(c.n_head, 1u);
  EXPECT_EQ(c.head_size, 64u);
  EXPECT_EQ(c.ffn_dim, 256u);
  EXPECT_EQ(c.decay_lora, 32u);
  EXPECT_EQ(c.iclr_lora, 32u);
  EXPECT_EQ(c.value_lora, 32u);
  EXPECT_EQ(c.gate_lora, 32u);
  EXPECT_EQ(c.StateScalars(), 12u * (64 + 64 + 64 * 64));
}

// rwkv.cpp tests/test_tiny_rwkv.c: evaluate '"', 'i', 'n' one at a time from the
// initial state; FP32 passes when |sum(logits - expected)| <= 0.001 * 1.05. We also
// hold the stricter sum |logits - expected| <= 0.001.
TEST_F(RealRwkv7Test, ReproducesRwkvCppReferenceLogits) {
  const std::vector<float> expected = testing::ReadFloats(testing::SharedModelPath(kLogitsFile));
  ASSERT_EQ(expected.size(), 256u) << "cannot read " << kLogitsFile;
  Rwkv7State state = Rwkv7State::Zeros(model().config());
  std::vector<float> logits(256);
  for (uint32_t t : Bytes("\"in")) ASSERT_OK(model().Eval(t, &state, logits));
  double signed_sum = 0.0, abs_sum = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < 256; ++i) {
    const double d = static_cast<double>(logits[i]) - expected[i];
    signed_sum += d;
    abs_sum += std::fabs(d);
    max_abs = std::max(max_abs, std::fabs(d));
  }
  std::printf("rwkv7 vs rwkv.cpp: sum diff %.3g, sum |diff| %.3g, max |diff| %.3g\n", signed_sum, abs_sum,
              max_abs);
  EXPECT_LE(std::fabs(signed_sum), 0.001 * 1.05);
  EXPECT_LE(abs_sum, 0.001);
  // Not trivially close: the logits are spread over several units.
  EXPECT_GT(*std::max_element(logits.begin(), logits.end()) - *std::min_element(logits.begin(), logits.end()),
            2.0f);
}

TEST_F(RealRwkv7Test, PredictsEnglishText) {
  // Mean negative log2-likelihood of each next byte of kText, in bits per byte. A
  // uniform guess costs 8; the tiny trained model does clearly better even from the
  // zero state on a short sentence.
  const std::vector<uint32_t> text = Bytes(kText);
  Rwkv7State state = Rwkv7State::Zeros(model().config());
  std::vector<float> logits(256);
  double bits = 0.0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    ASSERT_OK(model().Eval(text[i], &state, logits));
    const float mx = *std::max_element(logits.begin(), logits.end());
    double z = 0.0;
    for (float l : logits) z += std::exp(static_cast<double>(l - mx));
    bits -= (static_cast<double>(logits[text[i + 1]] - mx) - std::log(z)) / std::log(2.0);
  }
  const double bpb = bits / static_cast<double>(text.size() - 1);
  std::printf("rwkv7 tiny: %.3f bits/byte on %zu bytes of English\n", bpb, text.size() - 1);
  EXPECT_LT(bpb, 6.0);
}

TEST_F(RealRwkv7Test, SequenceEqualsTokenByTokenBitExact) {
  const std::vector<uint32_t> text = Bytes(kText);
  Rwkv7State a = Rwkv7State::Zeros(model().config()), b = a;
  std::vector<float> la(256), lb(256);
  for (uint32_t t : text) ASSERT_OK(model().Eval(t, &a, la));
  ASSERT_OK(model().EvalSequence(text, &b, lb));
  EXPECT_TRUE(a.BitEqual(b));
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), 256 * sizeof(float)), 0);
}

// Stop at every boundary, export the state into a stored record, decode and import
// it, continue: logits and final state equal the uninterrupted run bit for bit.
TEST_F(RealRwkv7Test, ContinuationFromStoredStateIsBitExactAtEveryBoundary) {
  const std::vector<uint32_t> text = Bytes(kText);
  const Rwkv7Config& cfg = model().config();
  Rwkv7State full = Rwkv7State::Zeros(cfg);
  std::vector<float> want(256);
  ASSERT_OK(model().EvalSequence(text, &full, want));
  Rwkv7State prefix = Rwkv7State::Zeros(cfg);  // state after text[0, cut)
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    SCOPED_TRACE("boundary " + std::to_string(cut));
    if (cut > 0) ASSERT_OK(model().Eval(text[cut - 1], &prefix, {}));
    ASSERT_OK_AND_ASSIGN(RecurrentState exported, ExportState(cfg, prefix));
    EXPECT_EQ(exported.boundary_tokens, cut);
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> record, EncodeStateRecord(exported, model().fingerprint()));
    ASSERT_OK_AND_ASSIGN(DecodedStateRecord decoded, DecodeStateRecord(record));
    EXPECT_EQ(decoded.model_fingerprint, model().fingerprint());
    EXPECT_EQ(decoded.state, exported);
    ASSERT_OK_AND_ASSIGN(Rwkv7State resumed, ImportState(cfg, decoded.state));
    std::vector<float> got(256);
    ASSERT_OK(model().EvalSequence(std::span(text).subspan(cut), &resumed, got));
    EXPECT_TRUE(resumed.BitEqual(full));
    if (cut < text.size()) {
      EXPECT_EQ(std::memcmp(got.data(), want.data(), 256 * sizeof(float)), 0);
    }
  }
}

TEST_F(RealRwkv7Test, ExportedStateHasDocumentedTensors) {
  const Rwkv7Config& cfg = model().config();
  Rwkv7State s = Rwkv7State::Zeros(cfg);
  ASSERT_OK(model().EvalSequence(Bytes("Hello"), &s, {}));
  ASSERT_OK_AND_ASSIGN(RecurrentState r, ExportState(cfg, s));
  ASSERT_EQ(r.tensors.size(), 36u);
  EXPECT_EQ(r.tensors[9].name, "layers.3.att_shift");
  EXPECT_EQ(r.tensors[10].name, "layers.3.ffn_shift");
  EXPECT_EQ(r.tensors[11].name, "layers.3.wkv_state");
  EXPECT_EQ(r.tensors[11].shape, (std::vector<uint64_t>{1, 64, 64}));
  EXPECT_EQ(r.DataBytes(), 12u * (64 + 64 + 4096) * 4);
  EXPECT_OK(r.Validate());
  // After 5 tokens no part of the state is still all zeros.
  for (const StateTensor& t : r.tensors) {
    EXPECT_TRUE(std::any_of(t.data.begin(), t.data.end(), [](uint8_t b) { return b != 0; })) << t.name;
  }
}

}  // namespace
}  // namespace kvstash::rwkv7
