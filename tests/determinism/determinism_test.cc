// The determinism manifest on this build (tests/determinism/manifest.json), and that
// one flipped bit is caught: in a predictor weight (every payload then decodes to
// Mismatch), in a spec artifact's frequency table, and in the manifest itself; each
// failing comparison names the item.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/checksum.h"
#include "common/file_bytes.h"
#include "model/formats/model_loader.h"
#include "model/forward/linear.h"
#include "tests/determinism/determinism.h"
#include "tests/support/shared_models.h"
#include "tests/support/test_util.h"

namespace kvstash::determinism {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class DeterminismTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) return;
    auto m = model::LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    const std::string rw = testing::SharedModelPath("tiny-rwkv-7v0-834K-FP32.bin");
    if (std::filesystem::exists(rw)) {
      auto r = rwkv7::Rwkv7Model::Load(rw);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      rwkv_ = new rwkv7::Rwkv7Model(std::move(r).value());
    }
  }
  static void TearDownTestSuite() {
    delete model_;
    delete rwkv_;
    model_ = nullptr;
    rwkv_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "models/SmolLM2-135M-Instruct.Q4_1.gguf absent: run scripts/setup.sh";
    auto m = ReadManifest(testing::SourceDir() + "/tests/determinism/manifest.json");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = *m;
    if (rwkv_ == nullptr) {  // the shared RWKV-7 file is optional: its items are left out
      std::erase_if(manifest_, [](const auto& kv) { return kv.first.rfind("rwkv7.", 0) == 0; });
    }
  }
  Inputs Defaults(const std::string& fixtures = testing::SourceDir() + "/tests/determinism/fixtures") const {
    Inputs in;
    in.smollm = model_;
    in.rwkv7 = rwkv_;
    in.fixtures_dir = fixtures;
    return in;
  }

  static inline model::Model* model_ = nullptr;
  static inline rwkv7::Rwkv7Model* rwkv_ = nullptr;
  Digests manifest_;
};

TEST_F(DeterminismTest, ThisBuildEqualsTheManifest) {
  ASSERT_OK_AND_ASSIGN(Digests got, ComputeDigests(Defaults()));
  EXPECT_EQ(CompareDigests(manifest_, got), std::vector<std::string>{});
  // The encoder reproduces the committed x86-64 payloads byte for byte.
  for (const char* name : {"eval0", "eval1"}) {
    ASSERT_OK_AND_ASSIGN(auto bytes, ReadFileBytes(Defaults().fixtures_dir + "/spec-" + name + ".kvsp"));
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(Xxh3_64(bytes)));
    EXPECT_EQ(got["spec." + std::string(name) + ".reencoded"], hex) << name;
  }
}

TEST_F(DeterminismTest, FlippedPredictorWeightBitIsCaught) {
  auto* wk = dynamic_cast<const model::DenseLinear*>(model_->layers[3].wk.get());
  ASSERT_NE(wk, nullptr);
  auto flipped = std::make_shared<std::vector<float>>(wk->weights());
  uint32_t bits = std::bit_cast<uint32_t>((*flipped)[1234]);
  (*flipped)[1234] = std::bit_cast<float>(bits ^ (1u << 22));  // one mantissa bit
  ASSERT_OK_AND_ASSIGN(auto bad, model::DenseLinear::Create(flipped, wk->out_features(), wk->in_features()));
  std::unique_ptr<model::Linear> original = std::move(model_->layers[3].wk);
  model_->layers[3].wk = std::move(bad);
  auto got = ComputeDigests(Defaults());
  model_->layers[3].wk = std::move(original);
  ASSERT_OK(got.status());
  const std::vector<std::string> differ = CompareDigests(manifest_, *got);
  EXPECT_TRUE(Contains(differ, "predictor.w8a16-g128.weights"));
  EXPECT_TRUE(Contains(differ, "predictor.w8a16-g128.eval0.kv"));
  EXPECT_TRUE(Contains(differ, "spec.eval0.decoded"));
  EXPECT_EQ((*got)["spec.eval0.decoded"].rfind("error: Mismatch", 0), 0u) << (*got)["spec.eval0.decoded"];
  EXPECT_FALSE(Contains(differ, "spec.artifact.tables"));  // only what depends on the weight
}

TEST_F(DeterminismTest, FlippedFrequencyTableBitIsCaught) {
  const std::string dir = ::testing::TempDir() + "/determinism_flip_table";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(testing::SourceDir() + "/tests/determinism/fixtures", dir);
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> art, ReadFileBytes(dir + "/spec.kvsa"));
  ASSERT_GT(art.size(), 1024u);
  // A bit of the last table's bytes, with the trailing XXH3-64 recomputed so that the
  // file still parses as far as its checksum goes.
  const size_t body = art.size() - 8;
  art[body - 64] ^= 0x01;
  const uint64_t sum = Xxh3_64(std::span(art.data(), body));
  std::memcpy(art.data() + body, &sum, 8);
  ASSERT_OK(WriteFileBytes(dir + "/spec.kvsa", art));
  ASSERT_OK_AND_ASSIGN(Digests got, ComputeDigests(Defaults(dir)));
  const std::vector<std::string> differ = CompareDigests(manifest_, got);
  EXPECT_TRUE(Contains(differ, "spec.artifact.file"));
  EXPECT_TRUE(Contains(differ, "spec.artifact.tables"));
  EXPECT_TRUE(Contains(differ, "spec.eval0.decoded"));
  EXPECT_EQ(got["spec.eval0.decoded"].rfind("error: ", 0), 0u) << got["spec.eval0.decoded"];
  EXPECT_FALSE(Contains(differ, "predictor.w8a16-g128.eval0.kv"));
  std::filesystem::remove_all(dir);
}

TEST_F(DeterminismTest, FlippedManifestBitIsNamed) {
  Digests flipped = manifest_;
  std::string& v = flipped.at("spec.eval1.decoded");
  v.back() = v.back() == '0' ? '1' : '0';
  EXPECT_EQ(CompareDigests(flipped, manifest_), std::vector<std::string>{"spec.eval1.decoded"});
  Digests missing = manifest_;
  missing.erase("predictor.w8a16-g128.eval1.kv");
  EXPECT_EQ(CompareDigests(manifest_, missing), std::vector<std::string>{"predictor.w8a16-g128.eval1.kv"});
}

TEST(DeterminismSubsetTest, OutsidePromptsNamesTheItemsOfLaterPrompts) {
  EXPECT_FALSE(OutsidePrompts("predictor.w8a16-g128.eval0.kv", 1));
  EXPECT_TRUE(OutsidePrompts("predictor.w8a16-g128.eval1.kv", 1));
  EXPECT_TRUE(OutsidePrompts("spec.eval1.decoded", 1));
  EXPECT_FALSE(OutsidePrompts("spec.eval1.decoded", 2));
  EXPECT_TRUE(OutsidePrompts("spec.eval12.reencoded", 2));
  EXPECT_FALSE(OutsidePrompts("spec.artifact.tables", 0));
  EXPECT_FALSE(OutsidePrompts("rwkv7.spec-state@256.decoded", 0));
  EXPECT_FALSE(OutsidePrompts("spec.evaluation.x", 0));  // not ".evalN."
}

}  // namespace
}  // namespace kvstash::determinism
