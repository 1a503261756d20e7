// hybrid_predictor.cc mirrors this forward on purpose (the quantised predictor); change both together.
// The per-token forward of HybridModel (equations in hybrid_model.h and
// docs/models/hybrid.md; operation order follows transformers' modeling_qwen3_5.py).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_ops.h"
#include "model/hybrid/hybrid_weights.h"

namespace kvstash::hybrid {
namespace {

std::span<const float> Row(const std::vector<float>& v, size_t i, size_t n) {
  return std::span<const float>(v).subspan(i * n, n);
}

// Gated DeltaNet token mixer: x [D] -> out [D]; updates the layer's conv and delta state.
void LinearAttention(const HybridConfig& c, const LinearAttnWeights& w, std::span<const float> x,
                     HybridLayerState* s, std::span<float> out) {
  const uint32_t cd = c.conv_dim(), k = c.conv_kernel, kd = c.key_dim();
  const uint32_t dk = c.head_k_dim, dv = c.head_v_dim, nv = c.num_v_heads;
  const uint32_t ratio = c.num_v_heads / c.num_k_heads;
  std::vector<float> qkv(cd), z(c.value_dim()), b(nv), a(nv);
  MatVec(w.in_proj_qkv, x, qkv);
  MatVec(w.in_proj_z, x, z);
  MatVec(w.in_proj_b, x, b);
  MatVec(w.in_proj_a, x, a);

  // Depthwise causal conv over [conv state (k - 1 oldest first), current], then SiLU;
  // the state shifts by one and takes the current (pre-conv) input.
  std::vector<float> mixed(cd);
  for (uint32_t ch = 0; ch < cd; ++ch) {
    float* hist = s->conv.data() + uint64_t{ch} * (k - 1);
    const float* wc = w.conv.data() + uint64_t{ch} * k;
    float acc = 0.0f;
    for (uint32_t j = 0; j + 1 < k; ++j) acc += wc[j] * hist[j];
    acc += wc[k - 1] * qkv[ch];
    mixed[ch] = Silu(acc);
    for (uint32_t j = 0; j + 2 < k; ++j) hist[j] = hist[j + 1];
    hist[k - 2] = qkv[ch];
  }

  // q, k: l2norm per key head; q scaled by 1 / sqrt(head_k_dim).
  std::span<float> q(mixed.data(), kd), kk(mixed.data() + kd, kd);
  const float* v = mixed.data() + 2 * kd;
  const float qscale = std::sqrt(static_cast<float>(dk));
  for (uint32_t h = 0; h < c.num_k_heads; ++h) {
    L2NormInPlace(q.subspan(uint64_t{h} * dk, dk), 1e-6f);
    L2NormInPlace(kk.subspan(uint64_t{h} * dk, dk), 1e-6f);
    for (uint32_t i = 0; i < dk; ++i) q[uint64_t{h} * dk + i] /= qscale;
  }

  // Gated delta rule per value head (transformers' torch_recurrent_gated_delta_rule).
  std::vector<float> o(c.value_dim()), kv_mem(dv), delta(dv);
  for (uint32_t h = 0; h < nv; ++h) {
    const float beta = Sigmoid(b[h]);
    const float g = w.neg_a[h] * Softplus(a[h] + w.dt_bias[h]);
    const float decay = std::exp(g);
    const float* qh = q.data() + uint64_t{h / ratio} * dk;
    const float* kh = kk.data() + uint64_t{h / ratio} * dk;
    const float* vh = v + uint64_t{h} * dv;
    float* S = s->delta.data() + uint64_t{h} * dk * dv;  // S[i][j], i key, j value
    for (uint64_t e = 0; e < uint64_t{dk} * dv; ++e) S[e] *= decay;
    std::fill(kv_mem.begin(), kv_mem.end(), 0.0f);
    for (uint32_t i = 0; i < dk; ++i) {
      for (uint32_t j = 0; j < dv; ++j) kv_mem[j] += S[uint64_t{i} * dv + j] * kh[i];
    }
    for (uint32_t j = 0; j < dv; ++j) delta[j] = (vh[j] - kv_mem[j]) * beta;
    for (uint32_t i = 0; i < dk; ++i) {
      for (uint32_t j = 0; j < dv; ++j) S[uint64_t{i} * dv + j] += kh[i] * delta[j];
    }
    float* oh = o.data() + uint64_t{h} * dv;
    std::fill(oh, oh + dv, 0.0f);
    for (uint32_t i = 0; i < dk; ++i) {
      for (uint32_t j = 0; j < dv; ++j) oh[j] += S[uint64_t{i} * dv + j] * qh[i];
    }
    std::span<float> oh_span(oh, dv);
    RmsNormGated(oh_span, w.norm, std::span<const float>(z).subspan(uint64_t{h} * dv, dv),
                 c.rms_norm_eps, oh_span);
  }
  MatVec(w.out_proj, o, out);
}

// Gated full attention: x [D] at position pos -> out [D]; appends K/V to the cache.
void FullAttention(const HybridConfig& c, const AttnWeights& w, std::span<const float> inv_freq,
                   std::span<const float> x, uint32_t pos, HybridLayerState* s,
                   std::span<float> out) {
  const uint32_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const uint32_t groups = nh / nkv;
  std::vector<float> qg(2ull * nh * hd), q(uint64_t{nh} * hd), gate(uint64_t{nh} * hd);
  std::vector<float> kv(uint64_t{nkv} * hd), vv(uint64_t{nkv} * hd);
  MatVec(w.q_proj, x, qg);
  MatVec(w.k_proj, x, kv);
  MatVec(w.v_proj, x, vv);
  for (uint32_t h = 0; h < nh; ++h) {  // per head: [query (hd) | gate (hd)]
    std::memcpy(q.data() + uint64_t{h} * hd, qg.data() + 2ull * h * hd, hd * sizeof(float));
    std::memcpy(gate.data() + uint64_t{h} * hd, qg.data() + (2ull * h + 1) * hd,
                hd * sizeof(float));
    std::span<float> qh(q.data() + uint64_t{h} * hd, hd);
    RmsNormZeroCentred(qh, w.q_norm, c.rms_norm_eps, qh);
    ApplyRope(qh, pos, inv_freq);
  }
  for (uint32_t h = 0; h < nkv; ++h) {
    std::span<float> kh(kv.data() + uint64_t{h} * hd, hd);
    RmsNormZeroCentred(kh, w.k_norm, c.rms_norm_eps, kh);
    ApplyRope(kh, pos, inv_freq);
  }
  s->keys.insert(s->keys.end(), kv.begin(), kv.end());
  s->values.insert(s->values.end(), vv.begin(), vv.end());

  const uint32_t n = pos + 1;
  const uint64_t row = uint64_t{nkv} * hd;
  const float scaling = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> att(uint64_t{nh} * hd), scores(n);
  for (uint32_t h = 0; h < nh; ++h) {
    const float* qh = q.data() + uint64_t{h} * hd;
    const uint64_t koff = uint64_t{h / groups} * hd;
    float mx = -INFINITY;
    for (uint32_t t = 0; t < n; ++t) {
      const float* kt = s->keys.data() + t * row + koff;
      float dot = 0.0f;
      for (uint32_t i = 0; i < hd; ++i) dot += qh[i] * kt[i];
      scores[t] = dot * scaling;
      mx = std::max(mx, scores[t]);
    }
    float sum = 0.0f;
    for (uint32_t t = 0; t < n; ++t) {
      scores[t] = std::exp(scores[t] - mx);
      sum += scores[t];
    }
    float* ah = att.data() + uint64_t{h} * hd;
    for (uint32_t t = 0; t < n; ++t) {
      const float p = scores[t] / sum;
      const float* vt = s->values.data() + t * row + koff;
      for (uint32_t i = 0; i < hd; ++i) ah[i] += p * vt[i];
    }
  }
  for (uint64_t i = 0; i < att.size(); ++i) att[i] *= Sigmoid(gate[i]);
  MatVec(w.o_proj, att, out);
}

void Mlp(const LayerWeights& w, std::span<const float> x, std::span<float> out) {
  std::vector<float> g(w.gate_proj.size() / x.size()), u(g.size());
  MatVec(w.gate_proj, x, g);
  MatVec(w.up_proj, x, u);
  for (size_t i = 0; i < g.size(); ++i) g[i] = Silu(g[i]) * u[i];
  MatVec(w.down_proj, g, out);
}

}  // namespace

void HybridModel::Forward(uint32_t token, HybridState* state, std::span<float> logits) const {
  const HybridConfig& c = config_;
  const Weights& w = *weights_;
  const uint32_t d = c.hidden_size;
  std::vector<float> x(Row(w.embed, token, d).begin(), Row(w.embed, token, d).end());
  std::vector<float> h(d), y(d);
  for (uint32_t l = 0; l < c.num_layers(); ++l) {
    const LayerWeights& lw = w.layers[l];
    RmsNormZeroCentred(x, lw.input_norm, c.rms_norm_eps, h);
    if (c.layer_types[l] == LayerKind::kLinearAttention) {
      LinearAttention(c, lw.linear, h, &state->layers[l], y);
    } else {
      FullAttention(c, lw.attn, w.inv_freq, h, state->tokens, &state->layers[l], y);
    }
    for (uint32_t i = 0; i < d; ++i) x[i] += y[i];
    RmsNormZeroCentred(x, lw.post_norm, c.rms_norm_eps, h);
    Mlp(lw, h, y);
    for (uint32_t i = 0; i < d; ++i) x[i] += y[i];
  }
  state->tokens += 1;
  if (logits.empty()) return;
  RmsNormZeroCentred(x, w.norm, c.rms_norm_eps, h);
  MatVec(w.lm_head, h, logits);
}

Status HybridModel::Eval(uint32_t token, HybridState* state, std::span<float> logits) const {
  return EvalSequence(std::span<const uint32_t>(&token, 1), state, logits);
}

Status HybridModel::EvalSequence(std::span<const uint32_t> tokens, HybridState* state,
                                 std::span<float> logits) const {
  const uint64_t v = config_.vocab_size;
  if (state == nullptr) return Status::InvalidArgument("hybrid eval: null state");
  KVSTASH_RETURN_IF_ERROR(state->CheckShape(config_));
  const bool all_rows = !tokens.empty() && logits.size() == tokens.size() * v;
  if (!logits.empty() && logits.size() != v && !all_rows) {
    return Status::InvalidArgument("hybrid eval: logits span of " + std::to_string(logits.size()) +
                                   " floats (want 0, vocab_size or tokens * vocab_size)");
  }
  for (uint32_t t : tokens) {
    if (t >= config_.vocab_size) {
      return Status::InvalidArgument("hybrid eval: token " + std::to_string(t) +
                                     " >= vocab_size " + std::to_string(v));
    }
  }
  if (uint64_t{state->tokens} + tokens.size() > UINT32_MAX) {
    return Status::InvalidArgument("hybrid eval: position overflow");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::span<float> out;
    if (all_rows) {
      out = logits.subspan(i * v, v);
    } else if (i + 1 == tokens.size()) {
      out = logits;
    }
    Forward(tokens[i], state, out);
  }
  return Status::Ok();
}

}  // namespace kvstash::hybrid
