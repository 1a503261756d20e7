// rwkv7_predictor.cc mirrors this forward on purpose (the quantised predictor); change both together.
// The RWKV-7 forward pass, one token at a time (equations: docs/models/rwkv7.md;
// operation order of each primitive: rwkv7_ops.h). The comment above each step quotes
// the line of BlinkDL's rwkv_v7_numpy.py it computes.
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv7_ops.h"
#include "model/rwkv7/rwkv7_weights.h"

namespace kvstash::rwkv7 {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGroupNormEps = 64e-5f;
// e^-0.5: the decay is exp(-e^-0.5 * sigmoid(.)), in (e^-0.607, 1).
const float kDecayScale = static_cast<float>(std::exp(-0.5));

using Vec = std::vector<float>;

// Scratch vectors for one token, sized once per Eval call.
struct Scratch {
  explicit Scratch(const Rwkv7Config& c)
      : x(c.n_embd), xn(c.n_embd), xr(c.n_embd), xw(c.n_embd), xk(c.n_embd), xv(c.n_embd),
        xa(c.n_embd), xg(c.n_embd), r(c.n_embd), w(c.n_embd), k(c.n_embd), v(c.n_embd),
        a(c.n_embd), g(c.n_embd), kk(c.n_embd), y(c.n_embd), out(c.n_embd), v_first(c.n_embd),
        lora_w(c.decay_lora), lora_a(c.iclr_lora), lora_v(c.value_lora), lora_g(c.gate_lora),
        ffn(c.ffn_dim) {}
  Vec x, xn, xr, xw, xk, xv, xa, xg, r, w, k, v, a, g, kk, y, out, v_first;
  Vec lora_w, lora_a, lora_v, lora_g, ffn;
};

// Token shift: prev := shift, shift := xn; then mixed[i] = xn[i] + (prev[i] - xn[i]) * mix[i]
// ("x + m * (last_x - x)") for each (mix, mixed) pair.
void TokenShift(const Vec& xn, Vec& shift, Vec& prev_out) {
  prev_out = shift;
  shift = xn;
}
void Mix(const Vec& xn, const Vec& prev, const Vec& mix, Vec& out) {
  for (size_t i = 0; i < xn.size(); ++i) out[i] = xn[i] + (prev[i] - xn[i]) * mix[i];
}

// x += TimeMix(LayerNorm(x, ln1)) for layer l.
void TimeMix(const Rwkv7Config& cfg, const Rwkv7LayerWeights& lw, uint32_t l,
             Rwkv7LayerState& st, Scratch& s) {
  const size_t C = cfg.n_embd, N = cfg.head_size, H = cfg.n_head;
  LayerNorm(s.x, lw.ln1_w, lw.ln1_b, kLayerNormEps, s.xn);
  Vec prev;
  TokenShift(s.xn, st.att_shift, prev);
  Mix(s.xn, prev, lw.x_r, s.xr);
  Mix(s.xn, prev, lw.x_w, s.xw);
  Mix(s.xn, prev, lw.x_k, s.xk);
  Mix(s.xn, prev, lw.x_v, s.xv);
  Mix(s.xn, prev, lw.x_a, s.xa);
  Mix(s.xn, prev, lw.x_g, s.xg);

  // r = Wr @ xr;  k = Wk @ xk;  v = Wv @ xv
  MatVec(lw.receptance, s.xr, s.r);
  MatVec(lw.key, s.xk, s.k);
  MatVec(lw.value, s.xv, s.v);

  // w = exp(-sigmoid(tanh(xw @ Ww1) @ Ww2 + w_bias) / e**0.5)
  MatVec(lw.w1, s.xw, s.lora_w);
  for (float& t : s.lora_w) t = std::tanh(t);
  MatVec(lw.w2, s.lora_w, s.w);
  for (size_t i = 0; i < C; ++i) s.w[i] = std::exp(-kDecayScale * Sigmoid(lw.w0[i] + s.w[i]));

  // v0 = v (layer 0);  else v += (v0 - v) * sigmoid(xv @ Wv1 @ Wv2 + v_bias)
  if (l == 0) {
    s.v_first = s.v;
  } else {
    MatVec(lw.v1, s.xv, s.lora_v);
    MatVec(lw.v2, s.lora_v, s.out);
    for (size_t i = 0; i < C; ++i) {
      s.v[i] = s.v[i] + (s.v_first[i] - s.v[i]) * Sigmoid(lw.v0[i] + s.out[i]);
    }
  }

  // a = sigmoid(xa @ Wa1 @ Wa2 + a_bias)
  MatVec(lw.a1, s.xa, s.lora_a);
  MatVec(lw.a2, s.lora_a, s.a);
  for (size_t i = 0; i < C; ++i) s.a[i] = Sigmoid(lw.a0[i] + s.a[i]);

  // g = sigmoid(xg @ Wg1) @ Wg2
  MatVec(lw.g1, s.xg, s.lora_g);
  for (float& t : s.lora_g) t = Sigmoid(t);
  MatVec(lw.g2, s.lora_g, s.g);

  // kk = normalize(k * k_k) per head;  k = k * (1 + (a - 1) * k_a)
  for (size_t i = 0; i < C; ++i) s.kk[i] = s.k[i] * lw.k_k[i];
  L2NormalizeGroups(s.kk, N);
  for (size_t i = 0; i < C; ++i) s.k[i] = s.k[i] * (1.0f + (s.a[i] - 1.0f) * lw.k_a[i]);

  // S = S * w.mT - S @ kk * (kk*a).mT + v * k.mT;  y = S @ r    (per head)
  const std::span<float> S(st.wkv);
  for (size_t h = 0; h < H; ++h) {
    auto head = [&](const Vec& vec) { return std::span<const float>(vec).subspan(h * N, N); };
    Wkv7Head(S.subspan(h * N * N, N * N), head(s.r), head(s.w), head(s.k), head(s.v), head(s.kk),
             head(s.a), std::span<float>(s.y).subspan(h * N, N));
  }

  // y = group_norm(y);  y += ((r * k * r_k).sum per head) * v
  GroupNorm(s.y, H, lw.ln_x_w, lw.ln_x_b, kGroupNormEps, s.y);
  for (size_t h = 0; h < H; ++h) {
    float bonus = 0.0f;
    for (size_t j = h * N; j < (h + 1) * N; ++j) bonus += s.r[j] * s.k[j] * lw.r_k[j];
    for (size_t j = h * N; j < (h + 1) * N; ++j) s.y[j] = s.y[j] + bonus * s.v[j];
  }

  // x += Wo @ (y * g)
  for (size_t i = 0; i < C; ++i) s.y[i] = s.y[i] * s.g[i];
  MatVec(lw.output, s.y, s.out);
  for (size_t i = 0; i < C; ++i) s.x[i] = s.x[i] + s.out[i];
}

// x += ChannelMix(LayerNorm(x, ln2)):  Wv @ relu(Wk @ (x + m * (last_x - x)))**2
void ChannelMix(const Rwkv7LayerWeights& lw, Rwkv7LayerState& st, Scratch& s) {
  LayerNorm(s.x, lw.ln2_w, lw.ln2_b, kLayerNormEps, s.xn);
  Vec prev;
  TokenShift(s.xn, st.ffn_shift, prev);
  Mix(s.xn, prev, lw.ffn_x_k, s.xk);
  MatVec(lw.ffn_key, s.xk, s.ffn);
  for (float& t : s.ffn) {
    const float relu = t > 0.0f ? t : 0.0f;
    t = relu * relu;
  }
  MatVec(lw.ffn_value, s.ffn, s.out);
  for (size_t i = 0; i < s.x.size(); ++i) s.x[i] = s.x[i] + s.out[i];
}

}  // namespace

Status Rwkv7Model::Eval(uint32_t token, Rwkv7State* state, std::span<float> logits) const {
  return EvalSequence(std::span<const uint32_t>(&token, 1), state, logits);
}

Status Rwkv7Model::EvalSequence(std::span<const uint32_t> tokens, Rwkv7State* state,
                                std::span<float> logits) const {
  const Rwkv7Config& cfg = config_;
  if (state == nullptr) return Status::InvalidArgument("rwkv7 eval: null state");
  KVSTASH_RETURN_IF_ERROR(state->CheckShape(cfg));
  if (!logits.empty() && logits.size() != cfg.n_vocab) {
    return Status::InvalidArgument("rwkv7 eval: logits span has " +
                                   std::to_string(logits.size()) + " entries, need " +
                                   std::to_string(cfg.n_vocab));
  }
  for (uint32_t t : tokens) {
    if (t >= cfg.n_vocab) {
      return Status::InvalidArgument("rwkv7 eval: token " + std::to_string(t) +
                                     " out of range (n_vocab " + std::to_string(cfg.n_vocab) + ")");
    }
  }
  if (tokens.size() > UINT32_MAX - state->tokens) {
    return Status::InvalidArgument("rwkv7 eval: token count would overflow the state's counter");
  }
  const Weights& w = *weights_;
  const size_t C = cfg.n_embd;
  Scratch s(cfg);
  for (size_t n = 0; n < tokens.size(); ++n) {
    // x = layer_norm(emb[token], ln0)
    const std::span<const float> emb = std::span<const float>(w.emb).subspan(tokens[n] * C, C);
    LayerNorm(emb, w.ln0_w, w.ln0_b, kLayerNormEps, s.x);
    for (uint32_t l = 0; l < cfg.n_layer; ++l) {
      TimeMix(cfg, w.layers[l], l, state->layers[l], s);
      ChannelMix(w.layers[l], state->layers[l], s);
    }
    state->tokens += 1;
    if (n + 1 == tokens.size() && !logits.empty()) {
      // logits = head @ layer_norm(x, ln_out)
      LayerNorm(s.x, w.ln_out_w, w.ln_out_b, kLayerNormEps, s.xn);
      MatVec(w.head, s.xn, logits);
    }
  }
  return Status::Ok();
}

}  // namespace kvstash::rwkv7
