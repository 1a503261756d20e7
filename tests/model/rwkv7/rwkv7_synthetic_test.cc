// The RWKV-7 runtime on the committed synthetic fixture (tests/model/rwkv7/data/, written by
// make_synthetic_rwkv7.py with an independent float64 numpy forward): logits, exact
// continuation from stored state, argument errors, and loader validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kvstash/payload_format.h"
#include "kvstash/prefix_key.h"
#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv_file.h"
#include "tests/model/rwkv7/test_files.h"
#include "tests/support/test_util.h"

namespace kvstash::rwkv7 {
namespace {

constexpr char kFixtureSha256[] = "c3f2c201f35c1c80088da1707ebca3fd16aa9477008c1fa9ab58d977d1175845";

std::vector<uint8_t> FixtureBytes() {
  auto b = ReadFileBytes(testing::SyntheticModelPath());
  EXPECT_OK(b);
  return b.ok() ? std::move(b).value() : std::vector<uint8_t>{};
}

RwkvFile FixtureFile() { return ParseRwkvFile(FixtureBytes()).value(); }

Result<Rwkv7Model> ModelFrom(const RwkvFile& f) {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, SerializeRwkvFile(f));
  return Rwkv7Model::FromBytes(bytes);
}

class SyntheticRwkv7Test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Rwkv7Model::FromBytes(FixtureBytes());
    ASSERT_OK(m);
    model_ = std::make_unique<Rwkv7Model>(std::move(m).value());
  }
  const Rwkv7Model& model() const { return *model_; }
  std::unique_ptr<Rwkv7Model> model_;
};

TEST_F(SyntheticRwkv7Test, ConfigAndFingerprint) {
  const Rwkv7Config& c = model().config();
  EXPECT_EQ(c, (Rwkv7Config{16, 8, 3, 2, 4, 32, 4, 3, 2, 5}));
  EXPECT_EQ(ToHex(model().fingerprint()), kFixtureSha256);  // sha256sum of the file
}

TEST_F(SyntheticRwkv7Test, MatchesFloat64ReferenceAfterEveryToken) {
  const std::vector<float> golden = testing::ReadFloats(testing::SyntheticLogitsPath());
  const std::vector<uint32_t>& tokens = testing::SyntheticTokens();
  ASSERT_EQ(golden.size(), tokens.size() * 16);
  Rwkv7State state = Rwkv7State::Zeros(model().config());
  std::vector<float> logits(16);
  float spread = 0.0f;
  for (size_t t = 0; t < tokens.size(); ++t) {
    ASSERT_OK(model().Eval(tokens[t], &state, logits));
    for (size_t i = 0; i < 16; ++i) {
      EXPECT_NEAR(logits[i], golden[t * 16 + i], 2e-5) << "token " << t << " logit " << i;
      spread = std::max(spread, std::fabs(golden[t * 16 + i]));
    }
  }
  EXPECT_GT(spread, 1.0f);  // the fixture's logits are not all near zero
  EXPECT_EQ(state.tokens, tokens.size());
}

TEST_F(SyntheticRwkv7Test, ContinuationFromStoredStateIsBitExactAtEveryBoundary) {
  // 40 tokens, every boundary 0..40, through EncodeStateRecord / DecodeStateRecord.
  std::vector<uint32_t> text(40);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint32_t>((i * 7 + 3) % 16);
  const Rwkv7Config& cfg = model().config();
  Rwkv7State full = Rwkv7State::Zeros(cfg);
  std::vector<float> want(16);
  ASSERT_OK(model().EvalSequence(text, &full, want));
  Rwkv7State prefix = Rwkv7State::Zeros(cfg);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    SCOPED_TRACE("boundary " + std::to_string(cut));
    if (cut > 0) ASSERT_OK(model().Eval(text[cut - 1], &prefix, {}));
    ASSERT_OK_AND_ASSIGN(RecurrentState exported, ExportState(cfg, prefix));
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> record, EncodeStateRecord(exported, model().fingerprint()));
    ASSERT_OK_AND_ASSIGN(DecodedStateRecord decoded, DecodeStateRecord(record));
    ASSERT_OK_AND_ASSIGN(Rwkv7State resumed, ImportState(cfg, decoded.state));
    std::vector<float> got(16);
    ASSERT_OK(model().EvalSequence(std::span(text).subspan(cut), &resumed, got));
    EXPECT_TRUE(resumed.BitEqual(full));
    if (cut < text.size()) {
      EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * 16), 0);
    }
  }
}

TEST_F(SyntheticRwkv7Test, EvalRejectsBadArgumentsWithoutTouchingTheState) {
  const Rwkv7Config& cfg = model().config();
  Rwkv7State s = Rwkv7State::Zeros(cfg);
  ASSERT_OK(model().Eval(3, &s, {}));
  const Rwkv7State before = s;
  std::vector<float> logits(16), short_logits(15);
  EXPECT_STATUS(model().Eval(16, &s, logits), kInvalidArgument);
  const std::vector<uint32_t> seq = {1, 2, 99};
  EXPECT_STATUS(model().EvalSequence(seq, &s, logits), kInvalidArgument);
  EXPECT_STATUS(model().Eval(1, &s, short_logits), kInvalidArgument);
  EXPECT_TRUE(s.BitEqual(before));
  EXPECT_STATUS(model().Eval(1, nullptr, logits), kInvalidArgument);
  Rwkv7State wrong = s;
  wrong.layers[1].att_shift.pop_back();
  EXPECT_STATUS(model().Eval(1, &wrong, logits), kInvalidArgument);
  // An empty sequence is a no-op.
  EXPECT_OK(model().EvalSequence({}, &s, {}));
  EXPECT_TRUE(s.BitEqual(before));
}

TEST(SyntheticRwkv7LoadTest, Fp16WeightsLoadAndStayClose) {
  RwkvFile f = FixtureFile();
  for (RwkvFileTensor& t : f.tensors) {
    std::vector<float> v = t.ToF32().value();
    std::vector<uint16_t> half(v.size());
    ASSERT_OK(ConvertF32ToF16(v, half));
    t.data_type = 1;
    t.data.resize(2 * half.size());
    std::memcpy(t.data.data(), half.data(), t.data.size());  // little-endian host
  }
  f.header.data_type = 1;
  ASSERT_OK_AND_ASSIGN(Rwkv7Model m, ModelFrom(f));
  const std::vector<float> golden = testing::ReadFloats(testing::SyntheticLogitsPath());
  Rwkv7State s = Rwkv7State::Zeros(m.config());
  std::vector<float> logits(16);
  ASSERT_OK(m.EvalSequence(testing::SyntheticTokens(), &s, logits));
  const size_t last = golden.size() - 16;
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(logits[i], golden[last + i], 0.05);
}

TEST(SyntheticRwkv7LoadTest, RejectsMissingUnexpectedAndMisshapenTensors) {
  auto drop = [](RwkvFile f, const std::string& name) {
    std::erase_if(f.tensors, [&](const RwkvFileTensor& t) { return t.name == name; });
    return f;
  };
  auto find = [](RwkvFile& f, const std::string& name) -> RwkvFileTensor& {
    for (RwkvFileTensor& t : f.tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("fixture lacks " + name);
  };
  const RwkvFile good = FixtureFile();
  ASSERT_OK(ModelFrom(good));

  EXPECT_STATUS(ModelFrom(drop(good, "blocks.1.att.v1")), kCorruption);
  EXPECT_STATUS(ModelFrom(drop(good, "head.weight")), kCorruption);
  EXPECT_STATUS(ModelFrom(drop(good, "blocks.2.ffn.x_k")), kCorruption);
  EXPECT_STATUS(ModelFrom(drop(good, "blocks.0.att.x_rwkvag")), kNotSupported);

  RwkvFile f = good;
  RwkvFileTensor extra = find(f, "blocks.2.ln1.weight");
  extra.name = "blocks.3.ln1.weight";
  f.tensors.push_back(extra);
  EXPECT_STATUS(ModelFrom(f), kCorruption);

  f = good;  // v-first LoRA in layer 0 is not part of RWKV-7 x070
  extra = find(f, "blocks.1.att.v0");
  extra.name = "blocks.0.att.v0";
  f.tensors.push_back(extra);
  EXPECT_STATUS(ModelFrom(f), kCorruption);

  f = good;  // transposed: same element count, other dims
  find(f, "blocks.1.ffn.value.weight").dims = {8, 32};
  EXPECT_STATUS(ModelFrom(f), kCorruption);
  f = good;
  find(f, "blocks.0.att.w2").dims = {8, 4};
  EXPECT_STATUS(ModelFrom(f), kCorruption);
  f = good;
  find(f, "blocks.2.att.r_k").dims = {2, 4};  // heads and head size swapped
  EXPECT_STATUS(ModelFrom(f), kCorruption);

  f = good;
  f.header.n_layer = 2;  // blocks.2.* left over
  EXPECT_STATUS(ModelFrom(f), kCorruption);
  f = good;
  f.header.n_layer = 4;  // blocks.3.* missing
  EXPECT_STATUS(ModelFrom(f), kCorruption);
  f = good;
  f.header.n_vocab = 17;
  EXPECT_STATUS(ModelFrom(f), kCorruption);
}

TEST(SyntheticRwkv7LoadTest, EveryTruncationFails) {
  const std::vector<uint8_t> b = FixtureBytes();
  ASSERT_FALSE(b.empty());
  for (size_t n = 0; n < b.size(); n += (n < 512 ? 1 : 13)) {
    auto m = Rwkv7Model::FromBytes(std::span(b).first(n));
    EXPECT_FALSE(m.ok()) << "prefix " << n;
  }
}

TEST(SyntheticRwkv7LoadTest, LoadReportsMissingFile) {
  EXPECT_STATUS(Rwkv7Model::Load("/nonexistent/kvstash/rwkv7.bin"), kIOError);
}

}  // namespace
}  // namespace kvstash::rwkv7
