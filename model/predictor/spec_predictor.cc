// The CPU spec predictor; spec_predictor_cuda.cc mirrors Run step for step on purpose (same bits on a GPU).
#include "model/predictor/spec_predictor.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <utility>
#include <thread>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "model/predictor/spec_predictor_avx2.h"
#include "model/predictor/spec_predictor_avx512.h"
#include "numerics/det_math.h"
#include "numerics/det_math_double.h"
#include "numerics/parallel_for.h"
#include "numerics/spec_predictor_ops.h"

namespace kvstash::model {
namespace {

using spec::DAdd;
using spec::DDiv;
using spec::DMul;
using spec::DSub;

// Adds the wall-clock seconds since construction (or the last Lap) to a profile slot.
class Stopwatch {
 public:
  explicit Stopwatch(PredictorProfile* profile) : profile_(profile) {
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }
  void Lap(double PredictorProfile::*slot) {
    if (profile_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    profile_->*slot += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  // Restarts the watch without charging anything (after a step that timed itself).
  void Skip() {
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }

 private:
  PredictorProfile* profile_;
  std::chrono::steady_clock::time_point last_{};
};

// rows[t * b.size() + i] += b[i] for t < n (DAdd: the same bits on every path).
void AddBias(float* rows, uint32_t n, const std::vector<float>& b) {
  for (uint32_t t = 0; t < n; ++t) {
    float* r = rows + static_cast<size_t>(t) * b.size();
    for (size_t i = 0; i < b.size(); ++i) r[i] = DAdd(r[i], b[i]);
  }
}

}  // namespace

std::string SpecPredictorOptions::VariantName() const {
  if (arithmetic == Arithmetic::kGgml) return "ggml-q4_1-" + std::string(DTypeName(kv_dtype));
  const std::string base = activation_bits == 16 ? "w8a16" : "w8a8";
  const std::string grouped = group == 0 ? base : base + "-g" + std::to_string(group);
  return attention == Attention::kInt8 ? grouped + "-attn8" : grouped;
}

uint64_t PredictorCacheDigest(const PredictorCache& cache) {
  Xxh3Hasher h;
  for (size_t l = 0; l < cache.k.size(); ++l) {
    for (const auto* t : {&cache.k[l], &cache.v[l]}) {
      h.Update(std::span(reinterpret_cast<const uint8_t*>(t->data()), t->size() * sizeof(float)));
    }
  }
  return h.Digest();
}

float CanonicalDot(const float* a, const float* b, uint32_t n) {
  return CanonicalDotInline(a, b, n);
}

void DeterministicRope(uint32_t first, uint32_t count, uint32_t head_dim, float theta,
                       std::vector<float>* cos, std::vector<float>* sin) {
  const uint32_t half = head_dim / 2;
  cos->resize(static_cast<size_t>(count) * half);
  sin->resize(cos->size());
  const double log_theta = numerics::DetLogD(static_cast<double>(theta));
  for (uint32_t i = 0; i < half; ++i) {
    const double expo = (2.0 * i) / head_dim;
    const auto inv_freq = static_cast<float>(1.0 / numerics::DetExp(expo * log_theta));
    for (uint32_t p = 0; p < count; ++p) {
      const float angle = DMul(static_cast<float>(first + p), inv_freq);
      double s, c;
      numerics::DetSinCosD(static_cast<double>(angle), &s, &c);
      (*cos)[static_cast<size_t>(p) * half + i] = static_cast<float>(c);
      (*sin)[static_cast<size_t>(p) * half + i] = static_cast<float>(s);
    }
  }
}

Status SpecPredictor::Quantise(const Linear* linear, int group, QuantLinear* out) {
  const auto* dense = dynamic_cast<const DenseLinear*>(linear);
  if (dense == nullptr) {
    return Status::InvalidArgument("spec predictor needs dense fp32 projections");
  }
  out->out = dense->out_features();
  out->in = dense->in_features();
  const int g = group == 0 ? static_cast<int>(out->in) : group;
  KVSTASH_RETURN_IF_ERROR(spec::QuantizeRowsInt8(dense->weights(), static_cast<int>(out->out),
                                                 static_cast<int>(out->in), g, &out->w));
  return spec::PackWeights(out->w.q, out->w.scales, static_cast<int>(out->out),
                           static_cast<int>(out->in), g, &out->packed);
}

Result<std::unique_ptr<SpecPredictor>> SpecPredictor::Create(const Model& model,
                                                             const SpecPredictorOptions& options) {
  KVSTASH_RETURN_IF_ERROR(model.Validate());
  if (options.arithmetic == SpecPredictorOptions::Arithmetic::kGgml) {
    if (options.attention != SpecPredictorOptions::Attention::kFp32) {
      return Status::InvalidArgument("spec predictor: the ggml arithmetic has fp32 attention only");
    }
    std::unique_ptr<SpecPredictor> p(new SpecPredictor());
    p->config_ = model.config;
    p->options_ = options;
    p->embed_ = model.embed;
    KVSTASH_RETURN_IF_ERROR(p->LoadGgml(model));
    return p;
  }
  if (options.group < 0) return Status::InvalidArgument("predictor group must be >= 0");
  if (options.activation_bits != 8 && options.activation_bits != 16) {
    return Status::InvalidArgument("predictor activation_bits must be 8 or 16");
  }
  if (options.activation_bits == 16 && (options.group < 1 || options.group > spec::kMaxInt16Group)) {
    return Status::InvalidArgument("W8A16 predictor needs a group of 1..512 channels");
  }
  if (options.attention == SpecPredictorOptions::Attention::kInt8 &&
      model.config.head_dim > static_cast<uint32_t>(spec::kMaxInt16Group)) {
    return Status::InvalidArgument("int8 attention needs head_dim <= 512 (exact int32 scores)");
  }
  std::unique_ptr<SpecPredictor> p(new SpecPredictor());
  p->config_ = model.config;
  p->options_ = options;
  p->embed_ = model.embed;
  p->layers_.resize(model.layers.size());
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const LayerWeights& src = model.layers[l];
    Layer& dst = p->layers_[l];
    dst.attn_norm = src.attn_norm;
    dst.ffn_norm = src.ffn_norm;
    dst.q_norm = src.q_norm;
    dst.k_norm = src.k_norm;
    dst.bq = src.bq;
    dst.bk = src.bk;
    dst.bv = src.bv;
    const std::pair<const Linear*, QuantLinear*> projections[] = {
        {src.wq.get(), &dst.wq},         {src.wk.get(), &dst.wk},  {src.wv.get(), &dst.wv},
        {src.wo.get(), &dst.wo},         {src.w_gate.get(), &dst.w_gate},
        {src.w_up.get(), &dst.w_up},     {src.w_down.get(), &dst.w_down}};
    for (const auto& [lin, q] : projections) {
      KVSTASH_RETURN_IF_ERROR(Quantise(lin, options.group, q).WithContext(
          "layer " + std::to_string(l)));
    }
  }
  // Digest: options, then every quantised tensor and scale, in layer order.
  Xxh3Hasher h;
  std::vector<uint8_t> meta;
  ByteWriter w(&meta);
  w.U32(static_cast<uint32_t>(options.group));
  w.U32(static_cast<uint32_t>(options.activation_bits));
  w.U32(p->config_.n_layers);
  w.U32(p->config_.hidden);
  w.U32(Bits(p->config_.rope_theta));
  w.U32(Bits(p->config_.rms_eps));
  // fp32-attention variants hash exactly what they hashed before int8 attention existed.
  if (options.attention == SpecPredictorOptions::Attention::kInt8) w.U32(0x38747461u);  // "att8"
  h.Update(meta);
  auto hash_floats = [&h](const std::vector<float>& v) {
    h.Update(std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
  };
  hash_floats(*p->embed_);
  for (const Layer& L : p->layers_) {
    for (const auto* v : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm}) hash_floats(*v);
    // Models without biases hash exactly what they hashed before biases existed.
    if (p->config_.qkv_bias()) {
      for (const auto* v : {&L.bq, &L.bk, &L.bv}) hash_floats(*v);
    }
    for (const QuantLinear* q : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      h.Update(std::span(reinterpret_cast<const uint8_t*>(q->w.q.data()), q->w.q.size()));
      hash_floats(q->w.scales);
    }
  }
  p->digest_ = h.Digest();
  return p;
}

Status SpecPredictor::Project(std::initializer_list<std::pair<const QuantLinear*, float*>> outputs,
                              const float* x, uint32_t rows, spec::PackedActivations* work,
                              PredictorProfile* profile) const {
  Stopwatch sw(profile);
  const QuantLinear& first = *outputs.begin()->first;
  const int group = options_.group == 0 ? static_cast<int>(first.in) : options_.group;
  const auto in = std::span(x, static_cast<size_t>(rows) * first.in);
  const int m = static_cast<int>(rows), k = static_cast<int>(first.in);
  if (options_.backend != spec::GemmBackend::kScalar) {
    // The blocked kernel over pre-packed weights (same bits as the reference below);
    // the projections share one quantisation of x (same k and group).
    KVSTASH_RETURN_IF_ERROR(spec::QuantizeActivations(in, m, first.packed.shape, options_.activation_bits,
                                                      options_.backend, options_.threads, work));
    sw.Lap(&PredictorProfile::quantize_s);
    for (const auto& [q, y] : outputs) {
      KVSTASH_RETURN_IF_ERROR(spec::GemmPacked(*work, q->packed, std::span(y, static_cast<size_t>(rows) * q->out),
                                               options_.backend, options_.threads));
    }
    sw.Lap(&PredictorProfile::gemm_s);
    return Status::Ok();
  }
  // kScalar: the portable reference (row-major int16/int8 activations, unpacked weights).
  spec::Int16Rows a16;
  spec::Int8Rows a8;
  if (options_.activation_bits == 16) {
    KVSTASH_RETURN_IF_ERROR(spec::QuantizeRowsInt16(in, m, k, group, &a16));
  } else {
    KVSTASH_RETURN_IF_ERROR(spec::QuantizeRowsInt8(in, m, k, group, &a8));
  }
  sw.Lap(&PredictorProfile::quantize_s);
  for (const auto& [q, y] : outputs) {
    const auto out = std::span(y, static_cast<size_t>(rows) * q->out);
    const int n = static_cast<int>(q->out);
    KVSTASH_RETURN_IF_ERROR(
        options_.activation_bits == 16
            ? spec::Int16x8GemmGroupedNT(a16.q, a16.scales, q->w.q, q->w.scales, out, m, n, k, group,
                                         options_.backend, options_.threads)
            : spec::Int8GemmGroupedNT(a8.q, a8.scales, q->w.q, q->w.scales, out, m, n, k, group,
                                      options_.backend, options_.threads));
  }
  sw.Lap(&PredictorProfile::gemm_s);
  return Status::Ok();
}

void SpecPredictor::RmsNormRows(float* x, uint32_t rows, uint32_t n,
                                const std::vector<float>& w) const {
  for (uint32_t r = 0; r < rows; ++r) {
    RmsNormRow(x + static_cast<size_t>(r) * n, n, w.data(), config_.rms_eps);
  }
}

void SpecPredictor::Attention(uint32_t layer, uint32_t first, uint32_t rows, const float* q,
                              const PredictorCache& cache, float* out) const {
  const ModelConfig& c = config_;
  const uint32_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const float scale = spec::DetRsqrt(static_cast<float>(hd));
  const std::vector<float>& K = cache.k[layer];
  const std::vector<float>& V = cache.v[layer];
  const size_t stride = static_cast<size_t>(c.n_kv_heads) * hd;
  const int threads = std::max(1, options_.threads);
  // One scratch buffer per worker, sized for the longest row (keys 0..first+rows-1).
  const size_t row_scratch = static_cast<size_t>(first) + rows + 8;
#if defined(__x86_64__)
  if (options_.backend != spec::GemmBackend::kScalar && spec::CpuHasAvx2()) {
    const auto avx512 = spec::UseAvx512(options_.backend);
    const bool use512 = avx512.ok() && *avx512;
    // A job is a tile of kTileTokens tokens x the query heads that share one kv head:
    // the tile's rows reuse each block of keys and values while it is in L1.
    constexpr uint32_t kTileTokens = 8;
    const uint32_t tiles = (rows + kTileTokens - 1) / kTileTokens;
    std::vector<std::vector<float>> scratch(static_cast<size_t>(threads),
                                            std::vector<float>(row_scratch * group * kTileTokens));
    const size_t token_stride = static_cast<size_t>(c.n_heads) * hd;
    numerics::ParallelFor(tiles * c.n_kv_heads, threads, [&](uint32_t w, uint32_t job) {
      const uint32_t t0 = (job / c.n_kv_heads) * kTileTokens, g = job % c.n_kv_heads;
      const uint32_t tokens = std::min(kTileTokens, rows - t0);
      const size_t at = static_cast<size_t>(t0) * token_stride + static_cast<size_t>(g) * group * hd;
      const auto tile = use512 ? avx512::AttentionTile : avx2::AttentionTile;
      tile(q + at, token_stride, tokens, group, &K[static_cast<size_t>(g) * hd], &V[static_cast<size_t>(g) * hd],
           stride, first + t0 + 1, hd, scale, scratch[w].data(), out + at, token_stride);
    });
    return;
  }
#endif
  std::vector<std::vector<float>> scratch(static_cast<size_t>(threads), std::vector<float>(row_scratch));
  numerics::ParallelFor(rows * c.n_heads, threads, [&](uint32_t w, uint32_t job) {
    const uint32_t t = job / c.n_heads, h = job % c.n_heads, g = h / group;
    const uint32_t n = first + t + 1;  // causal: keys 0..first+t
    AttentionRow(q + (static_cast<size_t>(t) * c.n_heads + h) * hd, &K[static_cast<size_t>(g) * hd],
                 &V[static_cast<size_t>(g) * hd], stride, n, hd, scale, scratch[w].data(),
                 out + (static_cast<size_t>(t) * c.n_heads + h) * hd);
  });
}

Status SpecPredictor::Run(std::span<const uint32_t> tokens, PredictorCache* cache) const {
  return Run(tokens, cache, nullptr);
}

Status SpecPredictor::Run(std::span<const uint32_t> tokens, PredictorCache* cache,
                          PredictorProfile* profile) const {
  const ModelConfig& c = config_;
  const auto T = static_cast<uint32_t>(tokens.size());
  if (T == 0) return Status::Ok();
  const uint32_t first = cache->tokens;
  if (c.max_positions != 0 && static_cast<uint64_t>(first) + T > c.max_positions) {
    return Status::InvalidArgument("predictor: sequence longer than the model's max positions");
  }
  for (uint32_t t : tokens) {
    if (t >= c.vocab_size) return Status::InvalidArgument("predictor: token id out of vocabulary");
  }
  if (cache->k.size() != c.n_layers) {
    if (cache->tokens != 0) return Status::InvalidArgument("predictor cache has the wrong shape");
    cache->k.assign(c.n_layers, {});
    cache->v.assign(c.n_layers, {});
  }
  if (options_.arithmetic == SpecPredictorOptions::Arithmetic::kGgml) {
    RunGgml(tokens, cache);
    return Status::Ok();
  }
  const uint32_t D = c.hidden, hd = c.head_dim, half = hd / 2;
  const uint32_t qd = c.q_dim(), kvd = c.kv_dim(), F = c.ffn_hidden;
  std::vector<float> x(static_cast<size_t>(T) * D), h(x.size());
  for (uint32_t t = 0; t < T; ++t) {
    std::copy_n(embed_->data() + static_cast<size_t>(tokens[t]) * D, D, x.data() + static_cast<size_t>(t) * D);
  }
  std::vector<float> cosv, sinv;
  DeterministicRope(first, T, hd, c.rope_theta, &cosv, &sinv);
  std::vector<float> q(static_cast<size_t>(T) * qd), k(static_cast<size_t>(T) * kvd), v(k.size());
  std::vector<float> att(q.size()), tmp(x.size());
  std::vector<float> gate(static_cast<size_t>(T) * F), up(gate.size());

  // Quantised activations of the hidden-size, q-size and ffn-size inputs, reused by
  // every layer (no reallocation per projection).
  spec::PackedActivations act_d, act_q, act_f;
  const bool use_avx2 = options_.backend != spec::GemmBackend::kScalar && spec::CpuHasAvx2();
  const auto avx512 = spec::UseAvx512(options_.backend);
  const bool use_avx512 = use_avx2 && avx512.ok() && *avx512;
  auto rope = [&](float* rows, uint32_t heads) {
    for (uint32_t t = 0; t < T; ++t) {
      const float* cs = &cosv[static_cast<size_t>(t) * half];
      const float* sn = &sinv[static_cast<size_t>(t) * half];
      for (uint32_t hh = 0; hh < heads; ++hh) {
        RopeRow(rows + (static_cast<size_t>(t) * heads + hh) * hd, cs, sn, half);
      }
    }
  };

  Stopwatch sw(profile);
  sw.Lap(&PredictorProfile::other_s);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[l];
    std::copy(x.begin(), x.end(), h.begin());
    sw.Lap(&PredictorProfile::other_s);
    RmsNormRows(h.data(), T, D, L.attn_norm);
    sw.Lap(&PredictorProfile::norm_rope_s);
    // The last layer's queries feed only its attention output, which no KV needs.
    const bool last = l + 1 == c.n_layers;
    KVSTASH_RETURN_IF_ERROR(
        last ? Project({{&L.wk, k.data()}, {&L.wv, v.data()}}, h.data(), T, &act_d, profile)
             : Project({{&L.wq, q.data()}, {&L.wk, k.data()}, {&L.wv, v.data()}}, h.data(), T, &act_d, profile));
    sw.Skip();  // Project timed itself
    if (c.qkv_bias()) {  // after the projection, before RoPE (Qwen2); element-wise: no ISA difference
      if (!last) AddBias(q.data(), T, L.bq);
      AddBias(k.data(), T, L.bk);
      AddBias(v.data(), T, L.bv);
    }
    if (c.qk_norm()) {
      if (!last) RmsNormRows(q.data(), T * c.n_heads, hd, L.q_norm);
      RmsNormRows(k.data(), T * c.n_kv_heads, hd, L.k_norm);
    }
    if (!last) rope(q.data(), c.n_heads);
    rope(k.data(), c.n_kv_heads);
    sw.Lap(&PredictorProfile::norm_rope_s);
    cache->k[l].insert(cache->k[l].end(), k.begin(), k.end());
    cache->v[l].insert(cache->v[l].end(), v.begin(), v.end());
    sw.Lap(&PredictorProfile::other_s);
    if (last) break;  // the last layer's attention and MLP feed no KV
    if (options_.attention == SpecPredictorOptions::Attention::kInt8) {
      KVSTASH_RETURN_IF_ERROR(IntAttention(l, first, T, q.data(), *cache, att.data()));
    } else {
      Attention(l, first, T, q.data(), *cache, att.data());
    }
    sw.Lap(&PredictorProfile::attention_s);
    KVSTASH_RETURN_IF_ERROR(Project({{&L.wo, tmp.data()}}, att.data(), T, &act_q, profile));
    sw.Skip();  // Project timed itself
    for (size_t i = 0; i < x.size(); ++i) x[i] = DAdd(x[i], tmp[i]);

    std::copy(x.begin(), x.end(), h.begin());
    sw.Lap(&PredictorProfile::other_s);
    RmsNormRows(h.data(), T, D, L.ffn_norm);
    sw.Lap(&PredictorProfile::norm_rope_s);
    KVSTASH_RETURN_IF_ERROR(
        Project({{&L.w_gate, gate.data()}, {&L.w_up, up.data()}}, h.data(), T, &act_d, profile));
    sw.Skip();  // Project timed itself
#if defined(__x86_64__)
    if (use_avx2) {
      // Element-wise, so splitting the rows over threads changes no bit.
      const auto silu = use_avx512 ? avx512::SiluMul : avx2::SiluMul;
      numerics::ParallelFor(T, options_.threads, [&](uint32_t, uint32_t t) {
        const size_t at = static_cast<size_t>(t) * F;
        silu(gate.data() + at, up.data() + at, F);
      });
    } else
#endif
    {
      (void)use_avx2;
      (void)use_avx512;
      for (size_t i = 0; i < gate.size(); ++i) gate[i] = DMul(spec::DetSilu(gate[i]), up[i]);
    }
    sw.Lap(&PredictorProfile::other_s);
    KVSTASH_RETURN_IF_ERROR(Project({{&L.w_down, tmp.data()}}, gate.data(), T, &act_f, profile));
    sw.Skip();  // Project timed itself
    for (size_t i = 0; i < x.size(); ++i) x[i] = DAdd(x[i], tmp[i]);
  }
  sw.Lap(&PredictorProfile::other_s);
  cache->tokens = first + T;
  return Status::Ok();
}

}  // namespace kvstash::model
