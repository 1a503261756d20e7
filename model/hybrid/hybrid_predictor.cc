// Mirror kept on purpose: the exact forward (hybrid_forward.cc) with int8 matrices; the two must change together.
// The hybrid predictor's forward: hybrid_forward.cc step for step with int8 matrices
// and deterministic elementary functions (hybrid_predictor.h).
#include "model/hybrid/hybrid_predictor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/checksum.h"
#include "model/hybrid/hybrid_weights.h"
#include "numerics/det_math.h"
#include "numerics/det_math_double.h"
#include "numerics/quantize.h"

namespace kvstash::hybrid {
namespace {

using Vec = std::vector<float>;

float DSigmoid(float x) { return 1.0f / (1.0f + spec::DetExp(-x)); }
float DSilu(float x) { return x * DSigmoid(x); }
float DSoftplus(float x) {
  return x > 20.0f ? x : static_cast<float>(numerics::DetLogD(1.0 + static_cast<double>(spec::DetExp(x))));
}

float InvRms(std::span<const float> x, float eps) {
  float ss = 0.0f;
  for (float v : x) ss += v * v;
  return 1.0f / std::sqrt(ss / static_cast<float>(x.size()) + eps);
}
void RmsNorm0(std::span<const float> x, std::span<const float> w, float eps, std::span<float> y) {
  const float r = InvRms(x, eps);
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] * r) * (1.0f + w[i]);
}
void L2Norm(std::span<float> x, float eps) {
  float ss = 0.0f;
  for (float v : x) ss += v * v;
  const float r = 1.0f / std::sqrt(ss + eps);
  for (float& v : x) v *= r;
}

// sum_i float(q[i]) * x[i], 8 lanes combined in a fixed tree, then the tail in order.
float DotI8(const int8_t* q, const float* x, size_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t body = n - n % 8;
  for (size_t i = 0; i < body; i += 8) {
    for (size_t l = 0; l < 8; ++l) lane[l] += static_cast<float>(q[i + l]) * x[i + l];
  }
  float acc = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (size_t i = body; i < n; ++i) acc += static_cast<float>(q[i]) * x[i];
  return acc;
}

// An int8 [rows, cols] matrix, one scale per (row, group).
struct QMatrix {
  size_t rows = 0, cols = 0, group = 0;
  std::vector<int8_t> q;
  Vec scales;
  void Apply(std::span<const float> x, std::span<float> out) const {
    const size_t groups = (cols + group - 1) / group;
    for (size_t o = 0; o < rows; ++o) {
      float acc = 0.0f;
      for (size_t g = 0; g < groups; ++g) {
        const size_t begin = g * group, len = std::min(group, cols - begin);
        acc += scales[o * groups + g] * DotI8(q.data() + o * cols + begin, x.data() + begin, len);
      }
      out[o] = acc;
    }
  }
};

Result<QMatrix> Quantize(const Vec& w, size_t rows, size_t cols, int group) {
  QMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.group = std::min<size_t>(static_cast<size_t>(group), cols);
  spec::Int8Rows q;
  KVSTASH_RETURN_IF_ERROR(spec::QuantizeRowsInt8(w, static_cast<int>(rows), static_cast<int>(cols),
                                                 static_cast<int>(m.group), &q));
  m.q = std::move(q.q);
  m.scales = std::move(q.scales);
  return m;
}

struct QLayer {
  Vec input_norm, post_norm;
  // linear attention
  QMatrix in_qkv, in_z, in_b, in_a, out_proj;
  Vec conv, dt_bias, neg_a, norm;
  // full attention
  QMatrix q_proj, k_proj, v_proj, o_proj;
  Vec q_norm, k_norm;
  QMatrix gate, up, down;
};

}  // namespace

struct HybridPredictor::Weights {
  Vec embed;
  Vec inv_freq;  // deterministic RoPE inverse frequencies [rotary_dim / 2]
  std::vector<QLayer> layers;
  uint64_t digest = 0;
};

HybridPredictor::HybridPredictor(HybridConfig config, HybridPredictorOptions options, std::unique_ptr<Weights> w)
    : config_(std::move(config)), options_(std::move(options)), weights_(std::move(w)) {}
HybridPredictor::HybridPredictor(HybridPredictor&&) noexcept = default;
HybridPredictor& HybridPredictor::operator=(HybridPredictor&&) noexcept = default;
HybridPredictor::~HybridPredictor() = default;
uint64_t HybridPredictor::weights_digest() const { return weights_->digest; }

Result<HybridPredictor> HybridPredictor::Create(const HybridModel& model, const HybridPredictorOptions& o) {
  if (o.group < 1 || o.group > 4096) return Status::InvalidArgument("hybrid predictor: group must be in 1..4096");
  const HybridConfig& c = model.config();
  const HybridModel::Weights& mw = *model.weights_;
  auto w = std::make_unique<Weights>();
  w->embed = mw.embed;
  w->inv_freq.resize(c.rotary_dim / 2);
  const double ln_theta = numerics::DetLogD(static_cast<double>(c.rope_theta));
  for (uint32_t i = 0; i < w->inv_freq.size(); ++i) {
    const double e = static_cast<double>(2 * i) / static_cast<double>(c.rotary_dim);
    w->inv_freq[i] = static_cast<float>(numerics::DetExp(-e * ln_theta));
  }
  const size_t d = c.hidden_size, in = c.intermediate_size;
  Xxh3Hasher h;
  auto hash_vec = [&h](const Vec& v) {
    h.Update(std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
  };
  auto q = [&](const Vec& src, size_t rows, size_t cols, QMatrix* dst) -> Status {
    KVSTASH_ASSIGN_OR_RETURN(*dst, Quantize(src, rows, cols, o.group));
    h.Update(std::span(reinterpret_cast<const uint8_t*>(dst->q.data()), dst->q.size()));
    hash_vec(dst->scales);
    return Status::Ok();
  };
  const uint32_t group = static_cast<uint32_t>(o.group);
  h.Update(std::span(reinterpret_cast<const uint8_t*>(&group), sizeof group));
  hash_vec(w->embed);
  hash_vec(w->inv_freq);
  for (uint32_t l = 0; l < c.num_layers(); ++l) {
    const LayerWeights& s = mw.layers[l];
    QLayer& t = w->layers.emplace_back();
    t.input_norm = s.input_norm;
    t.post_norm = s.post_norm;
    hash_vec(t.input_norm);
    hash_vec(t.post_norm);
    if (c.layer_types[l] == LayerKind::kLinearAttention) {
      const LinearAttnWeights& a = s.linear;
      KVSTASH_RETURN_IF_ERROR(q(a.in_proj_qkv, c.conv_dim(), d, &t.in_qkv));
      KVSTASH_RETURN_IF_ERROR(q(a.in_proj_z, c.value_dim(), d, &t.in_z));
      KVSTASH_RETURN_IF_ERROR(q(a.in_proj_b, c.num_v_heads, d, &t.in_b));
      KVSTASH_RETURN_IF_ERROR(q(a.in_proj_a, c.num_v_heads, d, &t.in_a));
      KVSTASH_RETURN_IF_ERROR(q(a.out_proj, d, c.value_dim(), &t.out_proj));
      t.conv = a.conv;
      t.dt_bias = a.dt_bias;
      t.neg_a = a.neg_a;
      t.norm = a.norm;
      for (const Vec* v : {&t.conv, &t.dt_bias, &t.neg_a, &t.norm}) hash_vec(*v);
    } else {
      const AttnWeights& a = s.attn;
      const size_t hd = c.head_dim;
      KVSTASH_RETURN_IF_ERROR(q(a.q_proj, 2 * c.num_attention_heads * hd, d, &t.q_proj));
      KVSTASH_RETURN_IF_ERROR(q(a.k_proj, c.num_key_value_heads * hd, d, &t.k_proj));
      KVSTASH_RETURN_IF_ERROR(q(a.v_proj, c.num_key_value_heads * hd, d, &t.v_proj));
      KVSTASH_RETURN_IF_ERROR(q(a.o_proj, d, c.num_attention_heads * hd, &t.o_proj));
      t.q_norm = a.q_norm;
      t.k_norm = a.k_norm;
      hash_vec(t.q_norm);
      hash_vec(t.k_norm);
    }
    KVSTASH_RETURN_IF_ERROR(q(s.gate_proj, in, d, &t.gate));
    KVSTASH_RETURN_IF_ERROR(q(s.up_proj, in, d, &t.up));
    KVSTASH_RETURN_IF_ERROR(q(s.down_proj, d, in, &t.down));
  }
  w->digest = h.Digest();
  return HybridPredictor(c, o, std::move(w));
}

void HybridPredictor::Forward(uint32_t token, HybridState* state) const {
  const HybridConfig& c = config_;
  const Weights& w = *weights_;
  const uint32_t d = c.hidden_size;
  const float eps = c.rms_norm_eps;
  Vec x(w.embed.begin() + uint64_t{token} * d, w.embed.begin() + uint64_t{token + 1} * d);
  Vec h(d), y(d);
  // RoPE cos/sin of this position (shared by every attention layer and head).
  const size_t half = w.inv_freq.size();
  Vec rc(half), rs(half);
  const float pos = static_cast<float>(state->tokens);
  for (size_t i = 0; i < half; ++i) {
    double s = 0, co = 0;
    numerics::DetSinCosD(static_cast<double>(pos * w.inv_freq[i]), &s, &co);
    rc[i] = static_cast<float>(co);
    rs[i] = static_cast<float>(s);
  }
  auto rope = [&](float* v) {
    for (size_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * rc[i] - b * rs[i];
      v[i + half] = b * rc[i] + a * rs[i];
    }
  };
  for (uint32_t l = 0; l < c.num_layers(); ++l) {
    const QLayer& lw = w.layers[l];
    HybridLayerState* s = &state->layers[l];
    RmsNorm0(x, lw.input_norm, eps, h);
    if (c.layer_types[l] == LayerKind::kLinearAttention) {
      const uint32_t cd = c.conv_dim(), k = c.conv_kernel, kd = c.key_dim();
      const uint32_t dk = c.head_k_dim, dv = c.head_v_dim, nv = c.num_v_heads;
      const uint32_t ratio = c.num_v_heads / c.num_k_heads;
      Vec qkv(cd), z(c.value_dim()), b(nv), a(nv), mixed(cd);
      lw.in_qkv.Apply(h, qkv);
      lw.in_z.Apply(h, z);
      lw.in_b.Apply(h, b);
      lw.in_a.Apply(h, a);
      for (uint32_t ch = 0; ch < cd; ++ch) {
        float* hist = s->conv.data() + uint64_t{ch} * (k - 1);
        const float* wc = lw.conv.data() + uint64_t{ch} * k;
        float acc = 0.0f;
        for (uint32_t j = 0; j + 1 < k; ++j) acc += wc[j] * hist[j];
        acc += wc[k - 1] * qkv[ch];
        mixed[ch] = DSilu(acc);
        for (uint32_t j = 0; j + 2 < k; ++j) hist[j] = hist[j + 1];
        hist[k - 2] = qkv[ch];
      }
      float* q = mixed.data();
      float* kk = mixed.data() + kd;
      const float* v = mixed.data() + 2 * kd;
      const float qscale = std::sqrt(static_cast<float>(dk));
      for (uint32_t hh = 0; hh < c.num_k_heads; ++hh) {
        L2Norm(std::span(q + uint64_t{hh} * dk, dk), 1e-6f);
        L2Norm(std::span(kk + uint64_t{hh} * dk, dk), 1e-6f);
        for (uint32_t i = 0; i < dk; ++i) q[uint64_t{hh} * dk + i] /= qscale;
      }
      Vec o(c.value_dim()), kv_mem(dv), delta(dv);
      for (uint32_t hv = 0; hv < nv; ++hv) {
        const float beta = DSigmoid(b[hv]);
        const float decay = spec::DetExp(lw.neg_a[hv] * DSoftplus(a[hv] + lw.dt_bias[hv]));
        const float* qh = q + uint64_t{hv / ratio} * dk;
        const float* kh = kk + uint64_t{hv / ratio} * dk;
        const float* vh = v + uint64_t{hv} * dv;
        float* S = s->delta.data() + uint64_t{hv} * dk * dv;
        for (uint64_t e = 0; e < uint64_t{dk} * dv; ++e) S[e] *= decay;
        std::fill(kv_mem.begin(), kv_mem.end(), 0.0f);
        for (uint32_t i = 0; i < dk; ++i) {
          for (uint32_t j = 0; j < dv; ++j) kv_mem[j] += S[uint64_t{i} * dv + j] * kh[i];
        }
        for (uint32_t j = 0; j < dv; ++j) delta[j] = (vh[j] - kv_mem[j]) * beta;
        for (uint32_t i = 0; i < dk; ++i) {
          for (uint32_t j = 0; j < dv; ++j) S[uint64_t{i} * dv + j] += kh[i] * delta[j];
        }
        float* oh = o.data() + uint64_t{hv} * dv;
        std::fill(oh, oh + dv, 0.0f);
        for (uint32_t i = 0; i < dk; ++i) {
          for (uint32_t j = 0; j < dv; ++j) oh[j] += S[uint64_t{i} * dv + j] * qh[i];
        }
        const float r = InvRms(std::span<const float>(oh, dv), eps);
        for (uint32_t j = 0; j < dv; ++j) oh[j] = (lw.norm[j] * (oh[j] * r)) * DSilu(z[uint64_t{hv} * dv + j]);
      }
      lw.out_proj.Apply(o, y);
    } else {
      const uint32_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
      const uint32_t groups = nh / nkv;
      Vec qg(2ull * nh * hd), q(uint64_t{nh} * hd), gate(uint64_t{nh} * hd), kv(uint64_t{nkv} * hd),
          vv(uint64_t{nkv} * hd);
      lw.q_proj.Apply(h, qg);
      lw.k_proj.Apply(h, kv);
      lw.v_proj.Apply(h, vv);
      for (uint32_t hh = 0; hh < nh; ++hh) {
        std::memcpy(q.data() + uint64_t{hh} * hd, qg.data() + 2ull * hh * hd, hd * sizeof(float));
        std::memcpy(gate.data() + uint64_t{hh} * hd, qg.data() + (2ull * hh + 1) * hd, hd * sizeof(float));
        std::span<float> qh(q.data() + uint64_t{hh} * hd, hd);
        RmsNorm0(qh, lw.q_norm, eps, qh);
        rope(qh.data());
      }
      for (uint32_t hh = 0; hh < nkv; ++hh) {
        std::span<float> kh(kv.data() + uint64_t{hh} * hd, hd);
        RmsNorm0(kh, lw.k_norm, eps, kh);
        rope(kh.data());
      }
      s->keys.insert(s->keys.end(), kv.begin(), kv.end());
      s->values.insert(s->values.end(), vv.begin(), vv.end());
      const uint32_t n = state->tokens + 1;
      const uint64_t row = uint64_t{nkv} * hd;
      const float scaling = 1.0f / std::sqrt(static_cast<float>(hd));
      Vec att(uint64_t{nh} * hd), scores(n);
      for (uint32_t hh = 0; hh < nh; ++hh) {
        const float* qh = q.data() + uint64_t{hh} * hd;
        const uint64_t koff = uint64_t{hh / groups} * hd;
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
          scores[t] = spec::DetExp(scores[t] - mx);
          sum += scores[t];
        }
        float* ah = att.data() + uint64_t{hh} * hd;
        for (uint32_t t = 0; t < n; ++t) {
          const float p = scores[t] / sum;
          const float* vt = s->values.data() + t * row + koff;
          for (uint32_t i = 0; i < hd; ++i) ah[i] += p * vt[i];
        }
      }
      for (uint64_t i = 0; i < att.size(); ++i) att[i] *= DSigmoid(gate[i]);
      lw.o_proj.Apply(att, y);
    }
    for (uint32_t i = 0; i < d; ++i) x[i] += y[i];
    RmsNorm0(x, lw.post_norm, eps, h);
    Vec g(c.intermediate_size), u(c.intermediate_size);
    lw.gate.Apply(h, g);
    lw.up.Apply(h, u);
    for (size_t i = 0; i < g.size(); ++i) g[i] = DSilu(g[i]) * u[i];
    lw.down.Apply(g, y);
    for (uint32_t i = 0; i < d; ++i) x[i] += y[i];
  }
  state->tokens += 1;
}

Status HybridPredictor::Eval(std::span<const uint32_t> tokens, HybridState* state) const {
  if (state == nullptr) return Status::InvalidArgument("hybrid predictor: null state");
  KVSTASH_RETURN_IF_ERROR(state->CheckShape(config_));
  for (uint32_t t : tokens) {
    if (t >= config_.vocab_size) {
      return Status::InvalidArgument("hybrid predictor: token " + std::to_string(t) + " >= vocab_size " +
                                     std::to_string(config_.vocab_size));
    }
  }
  if (uint64_t{state->tokens} + tokens.size() > UINT32_MAX) {
    return Status::InvalidArgument("hybrid predictor: position overflow");
  }
  for (uint32_t t : tokens) Forward(t, state);
  return Status::Ok();
}

}  // namespace kvstash::hybrid
