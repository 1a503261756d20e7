#include "model/forward/prefill.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/forward/attention.h"
#include "model/forward/ops.h"

namespace kvstash::model {

Result<PrefillResult> Prefill(const Model& model, std::span<const uint32_t> tokens, KvCache* cache,
                              const PrefillOptions& options) {
  const ModelConfig& c = model.config;
  if (tokens.empty()) return Status::InvalidArgument("prefill: no tokens");
  if (cache == nullptr) return Status::InvalidArgument("prefill: null cache");
  KVSTASH_RETURN_IF_ERROR(cache->CheckFor(c));
  for (uint32_t t : tokens) {
    if (t >= c.vocab_size) {
      return Status::InvalidArgument("prefill: token id " + std::to_string(t) + " >= vocab size " +
                                     std::to_string(c.vocab_size));
    }
  }
  const uint64_t total = static_cast<uint64_t>(cache->tokens) + tokens.size();
  if (total > kMaxPositions || (c.max_positions != 0 && total > c.max_positions)) {
    return Status::InvalidArgument("prefill: " + std::to_string(total) + " positions exceed the model's " +
                                   std::to_string(c.max_positions));
  }
  const uint32_t T = static_cast<uint32_t>(tokens.size());
  const uint32_t P = cache->tokens;
  const uint32_t D = c.hidden, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();

  PrefillResult res;
  res.first_position = P;
  res.tokens = T;

  std::vector<float> x(static_cast<size_t>(T) * D), h(x.size()), attn(static_cast<size_t>(T) * qd);
  std::vector<float> q(static_cast<size_t>(T) * qd), kbuf(static_cast<size_t>(T) * kvd);
  std::vector<float> gate(static_cast<size_t>(T) * c.ffn_hidden), up(gate.size()), scratch;
  for (uint32_t t = 0; t < T; ++t) {
    std::memcpy(&x[static_cast<size_t>(t) * D], model.embed->data() + static_cast<size_t>(tokens[t]) * D,
                D * sizeof(float));
  }
  const RopeTable rope = RopeTable::Build(P, T, hd, c.rope_theta);
  if (options.keep_pre_rope_k) res.k_pre_rope.resize(c.n_layers);

  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layers[l];
    std::vector<float>& kc = cache->k[l];
    std::vector<float>& vc = cache->v[l];
    kc.resize(total * kvd);
    vc.resize(total * kvd);
    float* k_new = kc.data() + static_cast<size_t>(P) * kvd;
    float* v_new = vc.data() + static_cast<size_t>(P) * kvd;

    h = x;
    RmsNorm(h.data(), T, D, w.attn_norm.data(), c.rms_eps);
    w.wq->Apply(h.data(), T, q.data());
    w.wk->Apply(h.data(), T, k_new);
    w.wv->Apply(h.data(), T, v_new);
    if (c.qkv_bias()) {
      AddBias(q.data(), T, qd, w.bq.data());
      AddBias(k_new, T, kvd, w.bk.data());
      AddBias(v_new, T, kvd, w.bv.data());
    }
    if (c.qk_norm()) {
      RmsNorm(q.data(), T * c.n_heads, hd, w.q_norm.data(), c.rms_eps);
      RmsNorm(k_new, T * c.n_kv_heads, hd, w.k_norm.data(), c.rms_eps);
    }
    if (options.keep_pre_rope_k) res.k_pre_rope[l].assign(k_new, k_new + static_cast<size_t>(T) * kvd);
    ApplyRope(q.data(), c.n_heads, hd, rope);
    ApplyRope(k_new, c.n_kv_heads, hd, rope);

    AttentionShape shape{c.n_heads, c.n_kv_heads, hd, P, T};
    CausalAttention(shape, q.data(), kc.data(), vc.data(), attn.data(), &scratch);
    w.wo->Apply(attn.data(), T, h.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];

    h = x;
    RmsNorm(h.data(), T, D, w.ffn_norm.data(), c.rms_eps);
    w.w_gate->Apply(h.data(), T, gate.data());
    w.w_up->Apply(h.data(), T, up.data());
    SiluMul(gate.data(), up.data(), gate.size());
    w.w_down->Apply(gate.data(), T, h.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
  }
  cache->tokens = static_cast<uint32_t>(total);

  if (options.logits != PrefillOptions::Logits::kNone) {
    const uint32_t first = options.logits == PrefillOptions::Logits::kAll ? 0 : T - 1;
    res.logit_rows = T - first;
    float* rows = x.data() + static_cast<size_t>(first) * D;
    RmsNorm(rows, res.logit_rows, D, model.final_norm.data(), c.rms_eps);
    res.logits.resize(static_cast<size_t>(res.logit_rows) * c.vocab_size);
    model.lm_head->Apply(rows, res.logit_rows, res.logits.data());
  }
  return res;
}

}  // namespace kvstash::model
