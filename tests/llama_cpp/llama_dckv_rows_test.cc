// dckv calibration rows from llama.cpp's own cache (dckv::AppendChunkRows on the parsed
// f16 sequence state) against our runtime's K before RoPE and V of the same tokens
// (model::Prefill with keep_pre_rope_k), on the real SmolLM2 GGUF.
//
// Tolerance, derived: the rows differ from ours by (1) llama.cpp's arithmetic (its
// Q4_1 products quantise the activations to Q8_1 blocks; ours are fp32): measured by
// the demo's calibration on 2,048 tokens of the calibration text (kvstash-demo prints
// it; docs/engines/llama_cpp.md, "dckv on llama.cpp's KV") at 1.32% relative RMS for K
// before RoPE and 3.38% for V; (2) the f16 cache: at most 2^-11 = 0.05% of each value;
// (3) the inverse rotation: orthogonal, so it keeps the RMS of (1) + (2), plus fp32
// rounding (~1e-7). The bounds are about twice the measured values: 3% for K, 7% for V.
// A wrong RoPE convention is far outside them: K as cached (no inverse RoPE), or
// rotated forward a second time, differs from our pre-RoPE K by more than 30%; that is
// checked too, so the K bound cannot pass by accident.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "codec/dckv/dckv_chunk_rows.h"
#include "codec/dckv/dckv_rope.h"
#include "engines/llama_cpp/llama_engine.h"
#include "engines/llama_cpp/llama_state.h"
#include "model/formats/model_loader.h"
#include "model/forward/prefill.h"
#include "tests/support/test_util.h"

namespace kvstash::llama_cpp {
namespace {

// Real text (the start of the Apache License 2.0's definitions).
constexpr const char* kText =
    "\"License\" shall mean the terms and conditions for use, reproduction, and distribution as "
    "defined by Sections 1 through 9 of this document. \"Licensor\" shall mean the copyright owner "
    "or entity authorized by the copyright owner that is granting the License. \"Legal Entity\" "
    "shall mean the union of the acting entity and all other entities that control, are controlled "
    "by, or are under common control with that entity.";

// sqrt(sum (a - b)^2 / sum b^2) over every layer.
double RelRms(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double d2 = 0, r2 = 0;
  for (size_t l = 0; l < b.size(); ++l) {
    for (size_t i = 0; i < b[l].size(); ++i) {
      d2 += (static_cast<double>(a[l][i]) - b[l][i]) * (static_cast<double>(a[l][i]) - b[l][i]);
      r2 += static_cast<double>(b[l][i]) * b[l][i];
    }
  }
  return std::sqrt(d2 / r2);
}

TEST(LlamaDckvRows, LlamaCppRowsMatchOurRuntimesPreRopeK) {
  const std::string path = testing::SourceDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  InitLlamaBackend();
  ASSERT_OK_AND_ASSIGN(auto lm, LoadModel(path));
  ASSERT_OK_AND_ASSIGN(auto ids, Tokenize(lm.get(), kText));
  ASSERT_GE(ids.size(), 64u);
  // llama.cpp's f16 cache of the text, parsed to the canonical layout (K after RoPE).
  ASSERT_OK_AND_ASSIGN(auto params, ContextParams(128, 1, /*flash_attn=*/false, DType::kF16));
  ASSERT_OK_AND_ASSIGN(auto layout, StateLayoutOf(lm.get(), params));
  ASSERT_OK_AND_ASSIGN(auto ctx, NewContext(lm.get(), params));
  ASSERT_OK(Evaluate(ctx.get(), ids, 0));
  ASSERT_OK_AND_ASSIGN(auto bytes, ExportSeqState(ctx.get()));
  ASSERT_OK_AND_ASSIGN(SeqState state, ParseSeqState(bytes, layout));
  ASSERT_EQ(state.kv.tokens, ids.size());

  // Our runtime's fp32 K before RoPE and V of the same token ids.
  ASSERT_OK_AND_ASSIGN(auto m, model::LoadModel(path));
  const auto& mc = m->config;
  const std::vector<uint32_t> tokens(ids.begin(), ids.end());
  auto cache = model::KvCache::ForModel(mc);
  model::PrefillOptions po;
  po.logits = model::PrefillOptions::Logits::kNone;
  po.keep_pre_rope_k = true;
  ASSERT_OK_AND_ASSIGN(auto pr, model::Prefill(*m, tokens, &cache, po));
  std::vector<std::vector<float>> ours_v(mc.n_layers);
  for (uint32_t l = 0; l < mc.n_layers; ++l) {
    ours_v[l].assign(cache.v[l].begin(), cache.v[l].begin() + tokens.size() * mc.n_kv_heads * mc.head_dim);
  }

  auto rows = dckv::DckvRows::ForShape(mc.n_layers, mc.n_kv_heads, mc.head_dim);
  ASSERT_OK(dckv::AppendChunkRows(state.kv.view(), 0, 0, mc.rope_theta, &rows));
  ASSERT_EQ(rows.rows, tokens.size());
  const double k_rms = RelRms(rows.k, pr.k_pre_rope), v_rms = RelRms(rows.v, ours_v);
  EXPECT_LT(k_rms, 0.03);
  EXPECT_LT(v_rms, 0.07);
  RecordProperty("k_rel_rms", std::to_string(k_rms));
  RecordProperty("v_rel_rms", std::to_string(v_rms));
  std::printf("llama.cpp rows vs our runtime's: K before RoPE %.4f, V %.4f relative RMS (%zu tokens)\n",
              k_rms, v_rms, tokens.size());

  // The wrong conventions are far outside the bound: K as cached, and K rotated forward.
  auto as_cached = dckv::DckvRows::ForShape(mc.n_layers, mc.n_kv_heads, mc.head_dim);
  ASSERT_OK(dckv::AppendChunkRows(state.kv.view(), 0, 0, mc.rope_theta, &as_cached));
  auto forward = as_cached;
  const uint32_t hd = mc.head_dim;
  for (uint32_t l = 0; l < mc.n_layers; ++l) {
    for (uint32_t t = 0; t < tokens.size(); ++t) {
      for (uint32_t h = 0; h < mc.n_kv_heads; ++h) {
        float* x = as_cached.k[l].data() + (static_cast<size_t>(t) * mc.n_kv_heads + h) * hd;
        dckv::RotateHead(x, hd, t, mc.rope_theta, false);  // back to llama.cpp's K after RoPE
        float* y = forward.k[l].data() + (static_cast<size_t>(t) * mc.n_kv_heads + h) * hd;
        for (int i = 0; i < 2; ++i) dckv::RotateHead(y, hd, t, mc.rope_theta, false);  // after RoPE, twice
      }
    }
  }
  EXPECT_GT(RelRms(as_cached.k, pr.k_pre_rope), 0.3);
  EXPECT_GT(RelRms(forward.k, pr.k_pre_rope), 0.3);
}

}  // namespace
}  // namespace kvstash::llama_cpp
