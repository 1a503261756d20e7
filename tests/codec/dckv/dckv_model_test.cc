// dckv on SmolLM2-135M and real text (label model): the codec's inverse RoPE recovers
// the runtime's K before RoPE, and on real KV the reconstruction error falls as the
// rate grows while every payload decodes (content checksum verified).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_rope.h"
#include "codec/dckv/dckv_synthesis.h"
#include "codec/dckv/dckv_trained.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/codec/dckv/dckv_trained_file.h"
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

  // The two tests' common start: a group-3 basis fitted on the KV of 300 calibration
  // tokens (K before RoPE), and the cache of 96 evaluation tokens.
  // rows_out (may be null) gets the calibration rows.
  void BasisAndEvalCache(DckvBasis* basis, model::KvCache* eval_cache, DckvRows* rows_out = nullptr) {
    model::KvCache cal_cache;
    model::PrefillResult cal_pr, eval_pr;
    ASSERT_NO_FATAL_FAILURE(Run(model::CorpusSplit::kCalibration, 300, &cal_cache, &cal_pr));
    ASSERT_NO_FATAL_FAILURE(Run(model::CorpusSplit::kEvaluation, 96, eval_cache, &eval_pr));
    const auto& c = model_->config;
    DckvRows rows;
    rows.n_layers = c.n_layers;
    rows.n_kv_heads = c.n_kv_heads;
    rows.head_dim = c.head_dim;
    rows.rows = cal_cache.tokens;
    rows.k = cal_pr.k_pre_rope;
    rows.v = cal_cache.v;
    ASSERT_OK_AND_ASSIGN(*basis, FitDckvBasis(rows, 3));
    if (rows_out) *rows_out = std::move(rows);
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
  model::KvCache eval_cache;
  DckvBasis basis;
  ASSERT_NO_FATAL_FAILURE(BasisAndEvalCache(&basis, &eval_cache));
  const auto& c = model_->config;
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

// Real SmolLM2 KV (96 evaluation tokens, group 3 basis from 300 calibration tokens, 16x, no
// token conditioning so c_i = bias_i + s_i step_i is known here): the decoded symbols
// equal the encoded ones; the tiled synthesis equals the defining loop bit for bit on
// the real basis and coefficients; Decode gives the same bytes on 1 and 3 threads; and
// the decoded coded values (every third row) are within bf16
// rounding (2^-8 relative) plus the fp32 summation bound of a double-precision
// reconstruction (mean + sum c_i basis_i, RoPE in double from the same fp32 angles).
TEST_F(DckvModelTest, RealKvDecodeMatchesDoubleReference) {
  model::KvCache eval_cache;
  DckvBasis basis;
  ASSERT_NO_FATAL_FAILURE(BasisAndEvalCache(&basis, &eval_cache));
  const auto& mc = model_->config;
  DckvRateOptions o;
  o.target_ratio = 16;
  o.rope_theta = mc.rope_theta;
  o.raw_tail = 16;
  ASSERT_OK_AND_ASSIGN(auto artifact, MakeDckvArtifact(basis, o));
  ASSERT_EQ(artifact.conditioning.rank, 0u);
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(std::move(artifact)));
  const DckvArtifact& a = codec.artifact();
  const uint32_t T = 96;
  ASSERT_OK_AND_ASSIGN(auto chunk, model::ToKvChunk(eval_cache, 0, T, DType::kBF16));
  ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), 0, T));
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, T, Digest256{}));
  uint32_t offset = 1;
  ASSERT_OK_AND_ASSIGN(auto parsed, codec.ParsePayload(payload, Digest256{}, &offset));
  EXPECT_EQ(offset, 0u);
  ASSERT_EQ(parsed.symbols, q.symbols);
  ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, Digest256{}));
  for (uint32_t threads : {1u, 3u}) {  // the work split changes nothing
    DckvCodec other = codec;
    other.set_threads(threads);
    ASSERT_OK_AND_ASSIGN(auto again, other.Decode(payload, Digest256{}));
    EXPECT_EQ(again.data, decoded.data) << threads;
  }
  const auto got = testing::ChunkValues(decoded);
  const uint32_t hr = a.HeadRow(), R = q.coded_rows(), hd = a.head_dim, half = hd / 2;
  ASSERT_GT(R, 60u);
  const uint64_t A = a.ActiveComponents();
  const double u = std::ldexp(1.0, -24);
  uint64_t group_offset = 0, checked = 0;
  for (const DckvGroup& g : a.groups) {
    const uint32_t na = g.n_active();
    std::vector<float> coef(static_cast<size_t>(R) * na);
    for (uint32_t r = 0; r < R; ++r) {
      for (uint32_t i = 0; i < na; ++i) {
        const auto s = static_cast<int16_t>(q.symbols[r * A + group_offset + i]);
        coef[static_cast<size_t>(r) * na + i] = g.token_map[i] + static_cast<float>(s) * g.step[i];
      }
    }
    group_offset += na;
    std::vector<float> fast(static_cast<size_t>(R) * g.dims), ref(fast.size());
    SynthesizeRows(PackBasis(g.basis, na, g.dims), g.mean, coef, R, fast);
    SynthesizeRowsReference(g.basis, na, g.dims, g.mean, coef, R, ref);
    ASSERT_EQ(0, std::memcmp(fast.data(), ref.data(), fast.size() * sizeof(float))) << g.first_layer;
    const double gamma = (na + 2) * u / (1 - (na + 2) * u);
    for (uint32_t r = 0; r < R; r += 3) {  // every third row keeps the test short
      const uint32_t t = q.raw_head_rows + r;
      std::vector<double> x(g.dims), mag(g.dims);
      for (uint32_t j = 0; j < g.dims; ++j) {
        x[j] = g.mean[j];
        mag[j] = std::abs(g.mean[j]);
        for (uint32_t i = 0; i < na; ++i) {
          const double term =
              double(coef[static_cast<size_t>(r) * na + i]) * g.basis[static_cast<size_t>(i) * g.dims + j];
          x[j] += term;
          mag[j] += std::abs(term);
        }
      }
      for (uint32_t jl = 0; jl < g.layers; ++jl) {
        const uint32_t l = g.first_layer + jl;
        double* xk = x.data() + 2ull * jl * hr;
        double* mk = mag.data() + 2ull * jl * hr;
        for (uint32_t h = 0; h < a.n_kv_heads; ++h) {
          for (uint32_t i = 0; i < half; ++i) {
            const float inv_freq = static_cast<float>(1.0 / std::pow(double(a.rope_theta), (2.0 * i) / hd));
            const float angle = static_cast<float>(t) * inv_freq;
            const double c = std::cos(double(angle)), sn = std::sin(double(angle));
            double* p = xk + h * hd;
            double* m = mk + h * hd;
            const double x0 = p[i], x1 = p[i + half], m0 = m[i] + m[i + half];
            p[i] = x0 * c - x1 * sn;
            p[i + half] = x1 * c + x0 * sn;
            m[i] = m[i + half] = m0;
          }
        }
        // Canonical layout: K_l then V_l, each [T, hr] (testing::ChunkValues order).
        for (int kv = 0; kv < 2; ++kv) {
          for (uint32_t c = 0; c < hr; ++c) {
            const double want = xk[kv * hr + c];
            const double tol = std::ldexp(std::abs(want), -8) + 4 * gamma * mk[kv * hr + c];
            const double have = got[(2ull * l + kv) * T * hr + static_cast<uint64_t>(t) * hr + c];
            ASSERT_LE(std::abs(have - want), tol)
                << "layer " << l << " kv " << kv << " t " << t << " c " << c;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, static_cast<uint64_t>((R + 2) / 3) * a.n_layers * 2 * hr);
}

// Import of a trained codec on real SmolLM2 KV (group-3 basis from 300 calibration
// tokens, 16x, no token conditioning): the artifact's own transform written as a
// trained file refits, on the same rows, to the artifact byte for byte; a separate
// encoder (W_e = W_d + noise of 0.5% of its mean |entry|) with small random nets gives a
// version 5 artifact whose payloads decode to the encoder's own reconstruction, with an
// error near the closed-form codec's (random perturbations, not training: no gain
// claimed).
TEST_F(DckvModelTest, RealKvTrainedImport) {
  model::KvCache eval_cache;
  DckvBasis basis;
  DckvRows rows;
  ASSERT_NO_FATAL_FAILURE(BasisAndEvalCache(&basis, &eval_cache, &rows));
  DckvRateOptions o;
  o.target_ratio = 16;
  o.rope_theta = model_->config.rope_theta;
  o.raw_tail = 16;
  ASSERT_OK_AND_ASSIGN(const DckvArtifact a, MakeDckvArtifact(basis, o));
  const auto base = a.Serialize();
  ASSERT_OK_AND_ASSIGN(
      auto same, TrainedDckvTransform(
                     testing::SafetensorsBytes(testing::TransformTensors(a), testing::Metadata(base)), base));
  ASSERT_OK_AND_ASSIGN(const DckvArtifact b, RefitDckvArtifact(same.transform, rows, {}));
  EXPECT_EQ(b.Serialize(), base);
  testing::Tensors t = testing::TransformTensors(a);
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    const auto& g = a.groups[gi];
    const std::string p = "group." + std::to_string(gi) + ".";
    auto& enc = t[p + "encoder"].values;
    double mean_abs = 0;
    for (float v : enc) mean_abs += std::abs(v) / static_cast<double>(enc.size());
    for (float& v : enc) v += static_cast<float>(0.005 * mean_abs) * n01(rng);
    testing::AddNet(&t, p + "decoder_net", 8, g.n_active(), g.dims, 1e-4f, 40 + gi);
    testing::AddNet(&t, p + "encoder_net", 8, g.dims, g.n_active(), 1e-4f, 50 + gi);
  }
  ASSERT_OK_AND_ASSIGN(auto trained,
                       TrainedDckvTransform(testing::SafetensorsBytes(t, testing::Metadata(base)), base));
  ASSERT_OK_AND_ASSIGN(const DckvArtifact c, RefitDckvArtifact(trained.transform, rows, {}));
  EXPECT_TRUE(c.HasEncoderBasis());
  ASSERT_OK_AND_ASSIGN(auto parsed, DckvArtifact::Parse(c.Serialize()));
  const uint32_t T = 96;
  ASSERT_OK_AND_ASSIGN(auto chunk, model::ToKvChunk(eval_cache, 0, T, DType::kBF16));
  const auto in = testing::ChunkValues(chunk);
  double mse[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(which == 0 ? a : parsed));
    ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, T, Digest256{}));
    ASSERT_OK_AND_ASSIGN(auto out, codec.Decode(payload, Digest256{}));
    ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), 0, T));
    ASSERT_OK_AND_ASSIGN(auto rec, codec.Reconstruct(q, 0));
    EXPECT_EQ(out.data, rec.data);
    const auto got = testing::ChunkValues(out);
    for (size_t i = 0; i < in.size(); ++i) mse[which] += (double(in[i]) - got[i]) * (double(in[i]) - got[i]);
    mse[which] /= static_cast<double>(in.size());
  }
  std::printf("[ info ] MSE closed form %.6g, separate encoder + nets %.6g\n", mse[0], mse[1]);
  EXPECT_LT(mse[1], 2.0 * mse[0]);
}

}  // namespace
}  // namespace kvstash::dckv
