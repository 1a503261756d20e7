// Mirror kept on purpose: the exact forward (rwkv7_forward.cc) in the predictor's numerics; the two change together.
// The predictor's forward pass: rwkv7_forward.cc step for step, with the matrices in
// the predictor's format and DetExp instead of libm (determinism argument in
// rwkv7_predictor.h). The fp32 primitives without libm calls (Dot, LayerNorm,
// GroupNorm, L2NormalizeGroups, Wkv7Head: only + - * / and IEEE sqrt) are shared with
// the reference through rwkv7_ops.h.
#include "model/rwkv7/rwkv7_predictor.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/checksum.h"
#include "kvstash/dtype_bits.h"
#include "model/rwkv7/rwkv7_ops.h"
#include "model/rwkv7/rwkv7_weights.h"
#include "numerics/det_math.h"
#include "numerics/quantize.h"

namespace kvstash::rwkv7 {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGroupNormEps = 64e-5f;
// e^-0.5 rounded to binary32 (0x3F1B4598), written as a literal so no libm is involved.
constexpr float kDecayScale = 0.60653065971263342f;

using Vec = std::vector<float>;

float DetSigmoid(float x) { return spec::DDiv(1.0f, spec::DAdd(1.0f, spec::DetExp(-x))); }

// tanh(x) = sign(x) * (1 - 2 / (e^(2|x|) + 1)); e^(2|x|) overflowing to +Inf gives 1.
float DetTanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f - 2.0f / (spec::DetExp(2.0f * a) + 1.0f);
  return x < 0.0f ? -t : t;
}

// sum_i float(q[i]) * x[i] in the 8-lane order of Dot (rwkv7_ops.h).
float DotI8(const int8_t* q, const float* x, size_t n) {
  float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const size_t body = n - n % 8;
  for (size_t i = 0; i < body; i += 8) {
    for (size_t l = 0; l < 8; ++l) lane[l] += static_cast<float>(q[i + l]) * x[i + l];
  }
  float acc = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
              ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (size_t i = body; i < n; ++i) acc += static_cast<float>(q[i]) * x[i];
  return acc;
}

// A matrix [rows][cols] in the predictor's format: int8 + scales, or fp32 values
// (exact, or rounded through bf16 / fp16).
struct PMatrix {
  Rwkv7WeightFormat format = Rwkv7WeightFormat::kFp32;
  size_t rows = 0, cols = 0, group = 0;  // group: int8 only
  std::vector<int8_t> q;                  // int8: [rows][cols]
  std::vector<float> scales;              // int8: [rows][ceil(cols / group)]
  std::vector<float> dense;               // float formats: [rows][cols]

  // out[o] = row o . x. int8: sum over groups g in ascending order of
  // scale[o][g] * DotI8(group g of row o, x), accumulated from 0.0f.
  void Apply(std::span<const float> x, std::span<float> out) const {
    if (!dense.empty()) {
      MatVec(dense, x, out);
      return;
    }
    const size_t groups = (cols + group - 1) / group;
    for (size_t o = 0; o < rows; ++o) {
      float acc = 0.0f;
      for (size_t g = 0; g < groups; ++g) {
        const size_t begin = g * group;
        const size_t len = std::min(group, cols - begin);
        acc += scales[o * groups + g] * DotI8(q.data() + o * cols + begin, x.data() + begin, len);
      }
      out[o] = acc;
    }
  }
  // Embedding row `r` as fp32 values.
  void Row(size_t r, std::span<float> out) const {
    if (!dense.empty()) {
      std::memcpy(out.data(), dense.data() + r * cols, cols * sizeof(float));
      return;
    }
    const size_t groups = (cols + group - 1) / group;
    for (size_t i = 0; i < cols; ++i) {
      out[i] = static_cast<float>(q[r * cols + i]) * scales[r * groups + i / group];
    }
  }
  uint64_t StoredBytes() const {
    switch (format) {
      case Rwkv7WeightFormat::kInt8: return q.size() + 4 * scales.size();
      case Rwkv7WeightFormat::kBf16:
      case Rwkv7WeightFormat::kFp16: return 2 * dense.size();
      case Rwkv7WeightFormat::kFp32: return 4 * dense.size();
    }
    return 0;
  }
};

Result<PMatrix> MakeMatrix(const Vec& w, size_t rows, size_t cols, const Rwkv7PredictorOptions& o) {
  PMatrix m;
  m.format = o.format;
  m.rows = rows;
  m.cols = cols;
  switch (o.format) {
    case Rwkv7WeightFormat::kInt8: {
      m.group = std::min<size_t>(static_cast<size_t>(o.group), cols);
      spec::Int8Rows q;
      KVSTASH_RETURN_IF_ERROR(spec::QuantizeRowsInt8(w, static_cast<int>(rows),
                                                     static_cast<int>(cols),
                                                     static_cast<int>(m.group), &q));
      m.q = std::move(q.q);
      m.scales = std::move(q.scales);
      return m;
    }
    case Rwkv7WeightFormat::kBf16:
      m.dense.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) m.dense[i] = Bf16ToF32(F32ToBf16(w[i]));
      return m;
    case Rwkv7WeightFormat::kFp16:
      m.dense.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) m.dense[i] = F16ToF32(F32ToF16(w[i]));
      return m;
    case Rwkv7WeightFormat::kFp32:
      m.dense = w;
      return m;
  }
  return Status::InvalidArgument("rwkv7 predictor: unknown weight format");
}

struct PLayer {
  Rwkv7LayerWeights vectors;  // the layer's fp32 vectors (its matrix fields left empty)
  PMatrix receptance, key, value, output, w1, w2, a1, a2, v1, v2, g1, g2, ffn_key, ffn_value;
};

struct Scratch {
  explicit Scratch(const Rwkv7Config& c)
      : x(c.n_embd), xn(c.n_embd), xr(c.n_embd), xw(c.n_embd), xk(c.n_embd), xv(c.n_embd),
        xa(c.n_embd), xg(c.n_embd), r(c.n_embd), w(c.n_embd), k(c.n_embd), v(c.n_embd),
        a(c.n_embd), g(c.n_embd), kk(c.n_embd), y(c.n_embd), out(c.n_embd), v_first(c.n_embd),
        prev(c.n_embd), emb(c.n_embd), lora_w(c.decay_lora), lora_a(c.iclr_lora),
        lora_v(c.value_lora), lora_g(c.gate_lora), ffn(c.ffn_dim) {}
  Vec x, xn, xr, xw, xk, xv, xa, xg, r, w, k, v, a, g, kk, y, out, v_first, prev, emb;
  Vec lora_w, lora_a, lora_v, lora_g, ffn;
};

void Mix(const Vec& xn, const Vec& prev, const Vec& mix, Vec& out) {
  for (size_t i = 0; i < xn.size(); ++i) out[i] = xn[i] + (prev[i] - xn[i]) * mix[i];
}

}  // namespace

struct Rwkv7Predictor::Weights {
  PMatrix emb;
  Vec ln0_w, ln0_b;
  std::vector<PLayer> layers;
  uint64_t digest = 0;
  uint64_t bytes = 0;
};

namespace {

void TimeMix(const Rwkv7Config& cfg, const PLayer& pl, uint32_t l, Rwkv7LayerState& st,
             Scratch& s) {
  const Rwkv7LayerWeights& lw = pl.vectors;
  const size_t C = cfg.n_embd, N = cfg.head_size, H = cfg.n_head;
  LayerNorm(s.x, lw.ln1_w, lw.ln1_b, kLayerNormEps, s.xn);
  s.prev = st.att_shift;
  st.att_shift = s.xn;
  Mix(s.xn, s.prev, lw.x_r, s.xr);
  Mix(s.xn, s.prev, lw.x_w, s.xw);
  Mix(s.xn, s.prev, lw.x_k, s.xk);
  Mix(s.xn, s.prev, lw.x_v, s.xv);
  Mix(s.xn, s.prev, lw.x_a, s.xa);
  Mix(s.xn, s.prev, lw.x_g, s.xg);

  pl.receptance.Apply(s.xr, s.r);
  pl.key.Apply(s.xk, s.k);
  pl.value.Apply(s.xv, s.v);

  pl.w1.Apply(s.xw, s.lora_w);
  for (float& t : s.lora_w) t = DetTanh(t);
  pl.w2.Apply(s.lora_w, s.w);
  for (size_t i = 0; i < C; ++i) s.w[i] = spec::DetExp(-kDecayScale * DetSigmoid(lw.w0[i] + s.w[i]));

  if (l == 0) {
    s.v_first = s.v;
  } else {
    pl.v1.Apply(s.xv, s.lora_v);
    pl.v2.Apply(s.lora_v, s.out);
    for (size_t i = 0; i < C; ++i) {
      s.v[i] = s.v[i] + (s.v_first[i] - s.v[i]) * DetSigmoid(lw.v0[i] + s.out[i]);
    }
  }

  pl.a1.Apply(s.xa, s.lora_a);
  pl.a2.Apply(s.lora_a, s.a);
  for (size_t i = 0; i < C; ++i) s.a[i] = DetSigmoid(lw.a0[i] + s.a[i]);

  pl.g1.Apply(s.xg, s.lora_g);
  for (float& t : s.lora_g) t = DetSigmoid(t);
  pl.g2.Apply(s.lora_g, s.g);

  for (size_t i = 0; i < C; ++i) s.kk[i] = s.k[i] * lw.k_k[i];
  L2NormalizeGroups(s.kk, N);
  for (size_t i = 0; i < C; ++i) s.k[i] = s.k[i] * (1.0f + (s.a[i] - 1.0f) * lw.k_a[i]);

  const std::span<float> S(st.wkv);
  for (size_t h = 0; h < H; ++h) {
    auto head = [&](const Vec& vec) { return std::span<const float>(vec).subspan(h * N, N); };
    Wkv7Head(S.subspan(h * N * N, N * N), head(s.r), head(s.w), head(s.k), head(s.v), head(s.kk),
             head(s.a), std::span<float>(s.y).subspan(h * N, N));
  }

  GroupNorm(s.y, H, lw.ln_x_w, lw.ln_x_b, kGroupNormEps, s.y);
  for (size_t h = 0; h < H; ++h) {
    float bonus = 0.0f;
    for (size_t j = h * N; j < (h + 1) * N; ++j) bonus += s.r[j] * s.k[j] * lw.r_k[j];
    for (size_t j = h * N; j < (h + 1) * N; ++j) s.y[j] = s.y[j] + bonus * s.v[j];
  }

  for (size_t i = 0; i < C; ++i) s.y[i] = s.y[i] * s.g[i];
  pl.output.Apply(s.y, s.out);
  for (size_t i = 0; i < C; ++i) s.x[i] = s.x[i] + s.out[i];
}

void ChannelMix(const PLayer& pl, Rwkv7LayerState& st, Scratch& s) {
  const Rwkv7LayerWeights& lw = pl.vectors;
  LayerNorm(s.x, lw.ln2_w, lw.ln2_b, kLayerNormEps, s.xn);
  s.prev = st.ffn_shift;
  st.ffn_shift = s.xn;
  Mix(s.xn, s.prev, lw.ffn_x_k, s.xk);
  pl.ffn_key.Apply(s.xk, s.ffn);
  for (float& t : s.ffn) {
    const float relu = t > 0.0f ? t : 0.0f;
    t = relu * relu;
  }
  pl.ffn_value.Apply(s.ffn, s.out);
  for (size_t i = 0; i < s.x.size(); ++i) s.x[i] = s.x[i] + s.out[i];
}

void HashFloats(Xxh3Hasher& h, const Vec& v) {
  h.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4));
}
void HashMatrix(Xxh3Hasher& h, const PMatrix& m) {
  h.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(m.q.data()), m.q.size()));
  HashFloats(h, m.scales);
  HashFloats(h, m.dense);
}

}  // namespace

const char* Rwkv7WeightFormatName(Rwkv7WeightFormat f) {
  switch (f) {
    case Rwkv7WeightFormat::kInt8: return "int8";
    case Rwkv7WeightFormat::kBf16: return "bf16";
    case Rwkv7WeightFormat::kFp16: return "fp16";
    case Rwkv7WeightFormat::kFp32: return "fp32";
  }
  return "unknown";
}

std::string Rwkv7PredictorOptions::Name() const {
  std::string n = Rwkv7WeightFormatName(format);
  if (format == Rwkv7WeightFormat::kInt8) n += "-g" + std::to_string(group);
  return n;
}

Result<Rwkv7Predictor> Rwkv7Predictor::Create(const Rwkv7Model& model,
                                              const Rwkv7PredictorOptions& options) {
  if (options.group < 1 || options.group > 4096) {
    return Status::InvalidArgument("rwkv7 predictor: group must be in 1..4096");
  }
  if (static_cast<uint8_t>(options.format) > static_cast<uint8_t>(Rwkv7WeightFormat::kFp32)) {
    return Status::InvalidArgument("rwkv7 predictor: unknown weight format");
  }
  const Rwkv7Config& c = model.config();
  const Rwkv7Model::Weights& mw = *model.weights_;
  auto w = std::make_unique<Weights>();
  const size_t C = c.n_embd, F = c.ffn_dim;
  // The embedding is a row lookup (no products, one row read per token), so it stays
  // fp32 in every format: quantising it would add error at no saving in arithmetic.
  Rwkv7PredictorOptions emb_options = options;
  emb_options.format = Rwkv7WeightFormat::kFp32;
  KVSTASH_ASSIGN_OR_RETURN(w->emb, MakeMatrix(mw.emb, c.n_vocab, C, emb_options));
  w->ln0_w = mw.ln0_w;
  w->ln0_b = mw.ln0_b;
  w->layers.resize(c.n_layer);
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    const Rwkv7LayerWeights& src = mw.layers[l];
    PLayer& pl = w->layers[l];
    pl.vectors = src;
    for (Vec* m : {&pl.vectors.receptance, &pl.vectors.key, &pl.vectors.value, &pl.vectors.output,
                   &pl.vectors.w1, &pl.vectors.w2, &pl.vectors.a1, &pl.vectors.a2, &pl.vectors.v1,
                   &pl.vectors.v2, &pl.vectors.g1, &pl.vectors.g2, &pl.vectors.ffn_key,
                   &pl.vectors.ffn_value}) {
      m->clear();
      m->shrink_to_fit();
    }
    KVSTASH_ASSIGN_OR_RETURN(pl.receptance, MakeMatrix(src.receptance, C, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.key, MakeMatrix(src.key, C, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.value, MakeMatrix(src.value, C, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.output, MakeMatrix(src.output, C, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.w1, MakeMatrix(src.w1, c.decay_lora, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.w2, MakeMatrix(src.w2, C, c.decay_lora, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.a1, MakeMatrix(src.a1, c.iclr_lora, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.a2, MakeMatrix(src.a2, C, c.iclr_lora, options));
    if (l > 0) {
      KVSTASH_ASSIGN_OR_RETURN(pl.v1, MakeMatrix(src.v1, c.value_lora, C, options));
      KVSTASH_ASSIGN_OR_RETURN(pl.v2, MakeMatrix(src.v2, C, c.value_lora, options));
    }
    KVSTASH_ASSIGN_OR_RETURN(pl.g1, MakeMatrix(src.g1, c.gate_lora, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.g2, MakeMatrix(src.g2, C, c.gate_lora, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.ffn_key, MakeMatrix(src.ffn_key, F, C, options));
    KVSTASH_ASSIGN_OR_RETURN(pl.ffn_value, MakeMatrix(src.ffn_value, C, F, options));
  }
  // Digest and size: format, group, then every stored value in load order.
  Xxh3Hasher h;
  const uint8_t head[5] = {static_cast<uint8_t>(options.format),
                           static_cast<uint8_t>(options.group & 0xFF),
                           static_cast<uint8_t>((options.group >> 8) & 0xFF), 0, 0};
  h.Update(head);
  uint64_t bytes = 0;
  auto account = [&](const PMatrix& m) {
    HashMatrix(h, m);
    bytes += m.StoredBytes();
  };
  auto account_vec = [&](const Vec& v) {
    HashFloats(h, v);
    bytes += 4 * v.size();
  };
  account(w->emb);
  account_vec(w->ln0_w);
  account_vec(w->ln0_b);
  for (const PLayer& pl : w->layers) {
    for (const PMatrix* m : {&pl.receptance, &pl.key, &pl.value, &pl.output, &pl.w1, &pl.w2, &pl.a1,
                             &pl.a2, &pl.v1, &pl.v2, &pl.g1, &pl.g2, &pl.ffn_key, &pl.ffn_value}) {
      account(*m);
    }
    const Rwkv7LayerWeights& v = pl.vectors;
    for (const Vec* x : {&v.ln1_w, &v.ln1_b, &v.ln2_w, &v.ln2_b, &v.x_r, &v.x_w, &v.x_k, &v.x_v,
                         &v.x_a, &v.x_g, &v.w0, &v.a0, &v.v0, &v.k_k, &v.k_a, &v.r_k, &v.ln_x_w,
                         &v.ln_x_b, &v.ffn_x_k}) {
      account_vec(*x);
    }
  }
  w->digest = h.Digest();
  w->bytes = bytes;
  return Rwkv7Predictor(c, options, std::move(w));
}

Rwkv7Predictor::Rwkv7Predictor(Rwkv7Config config, Rwkv7PredictorOptions options,
                               std::unique_ptr<Weights> w)
    : config_(config), options_(std::move(options)), weights_(std::move(w)) {}
Rwkv7Predictor::Rwkv7Predictor(Rwkv7Predictor&&) noexcept = default;
Rwkv7Predictor& Rwkv7Predictor::operator=(Rwkv7Predictor&&) noexcept = default;
Rwkv7Predictor::~Rwkv7Predictor() = default;

const Rwkv7Config& Rwkv7Predictor::config() const { return config_; }
const Rwkv7PredictorOptions& Rwkv7Predictor::options() const { return options_; }
uint64_t Rwkv7Predictor::weights_digest() const { return weights_->digest; }
uint64_t Rwkv7Predictor::weight_bytes() const { return weights_->bytes; }

Status Rwkv7Predictor::Eval(std::span<const uint32_t> tokens, Rwkv7State* state) const {
  const Rwkv7Config& cfg = config_;
  if (state == nullptr) return Status::InvalidArgument("rwkv7 predictor: null state");
  KVSTASH_RETURN_IF_ERROR(state->CheckShape(cfg));
  for (uint32_t t : tokens) {
    if (t >= cfg.n_vocab) {
      return Status::InvalidArgument("rwkv7 predictor: token " + std::to_string(t) +
                                     " out of range (n_vocab " + std::to_string(cfg.n_vocab) + ")");
    }
  }
  if (tokens.size() > UINT32_MAX - state->tokens) {
    return Status::InvalidArgument("rwkv7 predictor: token count would overflow the state's counter");
  }
  const Weights& w = *weights_;
  Scratch s(cfg);
  for (uint32_t token : tokens) {
    w.emb.Row(token, s.emb);
    LayerNorm(s.emb, w.ln0_w, w.ln0_b, kLayerNormEps, s.x);
    for (uint32_t l = 0; l < cfg.n_layer; ++l) {
      TimeMix(cfg, w.layers[l], l, state->layers[l], s);
      ChannelMix(w.layers[l], state->layers[l], s);
    }
    state->tokens += 1;
  }
  return Status::Ok();
}

}  // namespace kvstash::rwkv7
