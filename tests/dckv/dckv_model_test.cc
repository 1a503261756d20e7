// dckv on SmolLM2-135M and real text (label model): the codec's inverse RoPE recovers
// the runtime's K before RoPE, and on real KV the reconstruction error falls as the
// rate grows while every payload decodes (content checksum verified).
#include <gtest/gtest.h>

#include <filesystem>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_rope.h"
#include "model/kv_export.h"
#include "model/model_loader.h"
#include "model/prefill.h"
#include "model/text_corpus.h"
#include "tests/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

class DckvModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = kvstash::testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent: run scripts/setup.sh";
    auto m = model::LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }

  // Prefill of the first document of `split` (n tokens): cache and K before RoPE.
  void Run(model::CorpusSplit split, uint32_t n, model::KvCache* cache, model::PrefillResult* pr) {
    auto corpus = model::LoadCorpus(*model_->tokenizer, split, n, n);
    ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
    ASSERT_EQ(corpus->documents[0].tokens.size(), n);
    *cache = model::KvCache::ForModel(model_->config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    po.keep_pre_rope_k = true;
    auto r = model::Prefill(*model_, corpus->documents[0].tokens, cache, po);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    *pr = std::move(*r);
  }

  std::unique_ptr<model::Model> model_;
};

TEST_F(DckvModelTest, InverseRopeRecoversPreRopeK) {
  model::KvCache cache;
  model::PrefillResult pr;
  ASSERT_NO_FATAL_FAILURE(Run(model::CorpusSplit::kEvaluation, 40, &cache, &pr));
  const auto& c = model_->config;
  for (uint32_t l : {0u, 17u, c.n_layers - 1}) {
    std::vector<float> k = cache.k[l];
    for (uint32_t t = 0; t < cache.tokens; ++t) {
      for (uint32_t h = 0; h < c.n_kv_heads; ++h) {
        RotateHead(k.data() + (static_cast<size_t>(t) * c.n_kv_heads + h) * c.head_dim, c.head_dim, t,
                   c.rope_theta, true);
      }
    }
    for (size_t i = 0; i < k.size(); ++i) {
      ASSERT_NEAR(k[i], pr.k_pre_rope[l][i], 1e-4f * (1.0f + std::abs(pr.k_pre_rope[l][i]))) << l << " " << i;
    }
  }
}

TEST_F(DckvModelTest, RealKvErrorFallsWithRate) {
  model::KvCache cal_cache, eval_cache;
  model::PrefillResult cal_pr, eval_pr;
  ASSERT_NO_FATAL_FAILURE(Run(model::CorpusSplit::kCalibration, 300, &cal_cache, &cal_pr));
  ASSERT_NO_FATAL_FAILURE(Run(model::CorpusSplit::kEvaluation, 96, &eval_cache, &eval_pr));
  const auto& c = model_->config;
  DckvRows rows;
  rows.n_layers = c.n_layers;
  rows.n_kv_heads = c.n_kv_heads;
  rows.head_dim = c.head_dim;
  rows.rows = cal_cache.tokens;
  rows.k = cal_pr.k_pre_rope;
  rows.v = cal_cache.v;
  ASSERT_OK_AND_ASSIGN(auto basis, FitDckvBasis(rows, 3));
  ASSERT_OK_AND_ASSIGN(auto chunk, model::ToKvChunk(eval_cache, 0, 96, DType::kBF16));
  const auto in = testing::ChunkValues(chunk);
  double prev_mse = 1e30;
  size_t prev_bytes = 0;
  for (double ratio : {40.0, 16.0, 6.0}) {
    DckvRateOptions o;
    o.target_ratio = ratio;
    o.rope_theta = c.rope_theta;
    o.raw_tail = 16;
    ASSERT_OK_AND_ASSIGN(auto artifact, MakeDckvArtifact(basis, o));
    ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(std::move(artifact)));
    ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, 96, Digest256{}));
    ASSERT_OK_AND_ASSIGN(auto out, codec.Decode(payload, Digest256{}));
    const auto got = testing::ChunkValues(out);
    double mse = 0;
    for (size_t i = 0; i < in.size(); ++i) mse += (double(in[i]) - got[i]) * (double(in[i]) - got[i]);
    mse /= in.size();
    EXPECT_LT(mse, prev_mse) << ratio;
    EXPECT_GT(payload.size(), prev_bytes) << ratio;
    prev_mse = mse;
    prev_bytes = payload.size();
  }
}

}  // namespace
}  // namespace kvstash::dckv
