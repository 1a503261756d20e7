// The spec predictor's kGgml arithmetic: llama.cpp's CPU forward pass (flash attention
// off) over the GGUF's own Q4_1 blocks; the contract is in spec_predictor.h (READ ME
// FIRST) and the block arithmetic in ggml_ops.h. Every fp32 step a single rounding
// (-ffp-contract=off), in the fixed orders written below; the projections run on the
// SIMD kernels of ggml_gemm.h where the backend allows, with the scalar bits.
#include <algorithm>
#include <cmath>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "kvstash/dtype_bits.h"
#include "model/formats/ggml_types.h"
#include "model/predictor/ggml_attention_avx2.h"
#include "model/predictor/spec_predictor.h"
#include "model/predictor/spec_predictor_avx2.h"
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

// x rounded to the cache dtype (f16 or bf16) and back.
float RoundTo(float x, DType dt) {
  return dt == DType::kBF16 ? Bf16ToF32(F32ToBf16(x)) : F16ToF32(F32ToF16(x));
}

// Rows [rows, n] quantised to Q8_1, n / 32 blocks per row.
std::vector<ggml::BlockQ8_1> QuantizeRows(const float* x, uint32_t rows, uint32_t n) {
  std::vector<ggml::BlockQ8_1> out(static_cast<size_t>(rows) * (n / ggml::kBlock));
  for (uint32_t r = 0; r < rows; ++r) {
    ggml::QuantizeRowQ8_1(x + static_cast<size_t>(r) * n, n, &out[static_cast<size_t>(r) * (n / ggml::kBlock)]);
  }
  return out;
}

// Head vector r[hd] in the interleaved RoPE order (pairs 2i, 2i+1) -> rotate_half
// order (pairs i, i + hd/2), as InterleavedToHalfSplit permutes the weight rows.
void ToHalfSplit(float* r, uint32_t hd, float* scratch) {
  const uint32_t half = hd / 2;
  for (uint32_t i = 0; i < half; ++i) {
    scratch[i] = r[2 * i];
    scratch[i + half] = r[2 * i + 1];
  }
  std::copy_n(scratch, hd, r);
}

}  // namespace

Status GgmlArithmeticSupport(const Model& model) {
  const ModelConfig& c = model.config;
  if (c.qkv_bias()) {
    // The ggml arithmetic mirrors llama.cpp's Llama graph, which has no bias step.
    return Status::NotSupported("spec predictor: the ggml arithmetic has no q/k/v biases (" +
                                std::string(ArchitectureName(c.arch)) + "); use the int arithmetic");
  }
  if (model.ggml_layers.size() != c.n_layers) {
    return Status::InvalidArgument("ggml predictor needs a model loaded from a GGUF file");
  }
  if (c.arch != Architecture::kLlama || c.qk_norm()) {
    return Status::NotSupported("ggml predictor: llama architecture only");
  }
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const GgmlLayerTensors& t = model.ggml_layers[l];
    for (const GgmlTensor* p : {&t.wq, &t.wk, &t.wv, &t.wo, &t.w_gate, &t.w_up, &t.w_down}) {
      if (p->type != static_cast<uint32_t>(GgmlType::kQ4_1)) {
        return Status::NotSupported("ggml predictor: layer " + std::to_string(l) +
                                    " has a projection of ggml type " + std::to_string(p->type) +
                                    " (Q4_1 only)");
      }
    }
  }
  return Status::Ok();
}

Status SpecPredictor::LoadGgml(const Model& model) {
  const ModelConfig& c = config_;
  if (options_.kv_dtype != DType::kF16 && options_.kv_dtype != DType::kBF16) {
    return Status::InvalidArgument("ggml predictor: kv_dtype must be f16 or bf16");
  }
  KVSTASH_RETURN_IF_ERROR(GgmlArithmeticSupport(model));
  KVSTASH_ASSIGN_OR_RETURN(ggml_path_, ggml::ResolveGgmlPath(options_.backend));
  layers_.resize(c.n_layers);
  ggml_layers_.resize(c.n_layers);
  Xxh3Hasher h;
  std::vector<uint8_t> meta;
  ByteWriter w(&meta);
  const std::string name = options_.VariantName();
  w.U32(static_cast<uint32_t>(name.size()));
  meta.insert(meta.end(), name.begin(), name.end());
  w.U32(c.n_layers);
  w.U32(c.hidden);
  w.U32(Bits(c.rope_theta));
  w.U32(Bits(c.rms_eps));
  h.Update(meta);
  auto hash_floats = [&h](const std::vector<float>& v) {
    h.Update(std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
  };
  hash_floats(*embed_);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    layers_[l].attn_norm = model.layers[l].attn_norm;
    layers_[l].ffn_norm = model.layers[l].ffn_norm;
    hash_floats(layers_[l].attn_norm);
    hash_floats(layers_[l].ffn_norm);
    const GgmlLayerTensors& src = model.ggml_layers[l];
    GgmlLayer& dst = ggml_layers_[l];
    const std::pair<const GgmlTensor*, GgmlLinear*> projections[] = {
        {&src.wq, &dst.wq}, {&src.wk, &dst.wk},         {&src.wv, &dst.wv},        {&src.wo, &dst.wo},
        {&src.w_gate, &dst.w_gate}, {&src.w_up, &dst.w_up}, {&src.w_down, &dst.w_down}};
    for (const auto& [t, q] : projections) {
      q->out = t->rows;
      q->in = t->cols;
      q->blocks.resize(static_cast<size_t>(t->rows) * (t->cols / ggml::kBlock));
      KVSTASH_RETURN_IF_ERROR(ggml::UnpackQ4_1(t->bytes, q->blocks).WithContext("layer " + std::to_string(l)));
      if (ggml_path_ != ggml::GgmlPath::kScalar) {
        KVSTASH_RETURN_IF_ERROR(ggml::PackQ4_1(q->blocks, q->out, q->in / ggml::kBlock, &q->packed));
        q->blocks = {};
      }
      h.Update(t->bytes);
    }
  }
  digest_ = h.Digest();
  return Status::Ok();
}

void SpecPredictor::GgmlProject(const GgmlLinear& W, const ggml::BlockQ8_1* x, uint32_t rows, float* y) const {
  const uint32_t blocks = W.in / ggml::kBlock;
  if (ggml_path_ != ggml::GgmlPath::kScalar) {
    std::vector<float> xd(static_cast<size_t>(rows) * blocks), xs(xd.size());
    ggml::Q8_1Scales(x, xd.size(), xd.data(), xs.data());
    numerics::ParallelFor(W.packed.row_blocks, options_.threads, [&](uint32_t, uint32_t rb) {
      ggml::GemmRowBlock(ggml_path_, W.packed, rb, x, xd.data(), xs.data(), rows, y, W.out);
    });
    return;
  }
  numerics::ParallelFor(W.out, options_.threads, [&](uint32_t, uint32_t o) {
    const ggml::UnpackedQ4_1* wr = &W.blocks[static_cast<size_t>(o) * blocks];
    for (uint32_t t = 0; t < rows; ++t) {
      y[static_cast<size_t>(t) * W.out + o] = ggml::DotQ4_1Q8_1(wr, x + static_cast<size_t>(t) * blocks, blocks);
    }
  });
}

// Per (token, head): q and every cached k, v rounded to kv_dtype; s_j = dot(q, k_j)
// (CanonicalDotInline) * (1 / sqrt(hd)); e_j = DetExp(s_j - max); sum = double sum of
// e_j in increasing j; p_j = round(e_j * float(1 / sum)); out[d] = sum over increasing
// j of p_j * v_j[d].
void SpecPredictor::GgmlAttention(uint32_t layer, uint32_t first, uint32_t rows, const float* q,
                                  const PredictorCache& cache, float* out) const {
  const ModelConfig& c = config_;
  const DType dt = options_.kv_dtype;
  const uint32_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const float scale = DDiv(1.0f, std::sqrt(static_cast<float>(hd)));
  std::vector<float> K(cache.k[layer].size()), V(cache.v[layer].size());
#if defined(__x86_64__)
  // The AVX2 row (ggml_attention_avx2.h) on the SIMD paths, with the same bits.
  if (ggml_path_ != ggml::GgmlPath::kScalar && hd % 8 == 0) {
    ggml::avx2::RoundToDType(cache.k[layer].data(), K.data(), K.size(), dt);
    ggml::avx2::RoundToDType(cache.v[layer].data(), V.data(), V.size(), dt);
    GgmlAttentionRows(first, rows, q, K.data(), V.data(), out);
    return;
  }
#endif
  for (size_t i = 0; i < K.size(); ++i) K[i] = RoundTo(cache.k[layer][i], dt);
  for (size_t i = 0; i < V.size(); ++i) V[i] = RoundTo(cache.v[layer][i], dt);
  const size_t stride = static_cast<size_t>(c.n_kv_heads) * hd;
  const int threads = std::max(1, options_.threads);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(threads),
                                          std::vector<float>(static_cast<size_t>(first) + rows + hd));
  numerics::ParallelFor(rows * c.n_heads, threads, [&](uint32_t w, uint32_t job) {
    const uint32_t t = job / c.n_heads, hh = job % c.n_heads, g = hh / group;
    const uint32_t n = first + t + 1;  // causal: keys 0..first+t
    const float* qs = q + (static_cast<size_t>(t) * c.n_heads + hh) * hd;
    float* o = out + (static_cast<size_t>(t) * c.n_heads + hh) * hd;
    float* qr = scratch[w].data();
    float* e = qr + hd;
    for (uint32_t d = 0; d < hd; ++d) qr[d] = RoundTo(qs[d], dt);
    float m = -3.40282347e38f;
    for (uint32_t j = 0; j < n; ++j) {
      e[j] = DMul(CanonicalDotInline(qr, &K[j * stride + static_cast<size_t>(g) * hd], hd), scale);
      m = std::max(m, e[j]);
    }
    double sum = 0.0;
    for (uint32_t j = 0; j < n; ++j) {
      e[j] = spec::DetExp(DSub(e[j], m));
      sum += static_cast<double>(e[j]);
    }
    const auto inv = static_cast<float>(1.0 / sum);
    std::fill_n(o, hd, 0.0f);
    for (uint32_t j = 0; j < n; ++j) {
      const float p = RoundTo(DMul(e[j], inv), dt);
      const float* vv = &V[j * stride + static_cast<size_t>(g) * hd];
      for (uint32_t d = 0; d < hd; ++d) o[d] = DAdd(o[d], DMul(p, vv[d]));
    }
  });
}

#if defined(__x86_64__)
void SpecPredictor::GgmlAttentionRows(uint32_t first, uint32_t rows, const float* q, const float* K,
                                      const float* V, float* out) const {
  const ModelConfig& c = config_;
  const uint32_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const float scale = DDiv(1.0f, std::sqrt(static_cast<float>(hd)));
  const size_t stride = static_cast<size_t>(c.n_kv_heads) * hd;
  const int threads = std::max(1, options_.threads);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(threads),
                                          std::vector<float>(static_cast<size_t>(first) + rows + hd));
  numerics::ParallelFor(rows * c.n_heads, threads, [&](uint32_t w, uint32_t job) {
    const uint32_t t = job / c.n_heads, hh = job % c.n_heads, g = hh / group;
    const size_t at = (static_cast<size_t>(t) * c.n_heads + hh) * hd;
    ggml::avx2::AttentionRow(q + at, K + static_cast<size_t>(g) * hd, V + static_cast<size_t>(g) * hd, stride,
                             first + t + 1, hd, scale, options_.kv_dtype, scratch[w].data(), out + at);
  });
}
#endif

void SpecPredictor::RunGgml(std::span<const uint32_t> tokens, PredictorCache* cache) const {
  const ModelConfig& c = config_;
  const auto T = static_cast<uint32_t>(tokens.size());
  const uint32_t first = cache->tokens;
  const uint32_t D = c.hidden, hd = c.head_dim, half = hd / 2;
  const uint32_t qd = c.q_dim(), kvd = c.kv_dim(), F = c.ffn_hidden;
  std::vector<float> x(static_cast<size_t>(T) * D), h(x.size()), tmp(x.size());
  for (uint32_t t = 0; t < T; ++t) {
    std::copy_n(embed_->data() + static_cast<size_t>(tokens[t]) * D, D, x.data() + static_cast<size_t>(t) * D);
  }
  // ggml's rope cache: theta_0 = position, theta_i = theta_{i-1} * base^(-2/d) (fp32).
  const auto theta_scale =
      static_cast<float>(numerics::DetExp(-2.0 / hd * numerics::DetLogD(static_cast<double>(c.rope_theta))));
  std::vector<float> cosv(static_cast<size_t>(T) * half), sinv(cosv.size());
  for (uint32_t t = 0; t < T; ++t) {
    float theta = static_cast<float>(first + t);
    for (uint32_t i = 0; i < half; ++i) {
      double s, co;
      numerics::DetSinCosD(static_cast<double>(theta), &s, &co);
      cosv[static_cast<size_t>(t) * half + i] = static_cast<float>(co);
      sinv[static_cast<size_t>(t) * half + i] = static_cast<float>(s);
      theta = DMul(theta, theta_scale);
    }
  }
  // NORM rope on (r[2i], r[2i+1]), then the head to rotate_half order.
  std::vector<float> perm(hd);
  auto rope = [&](float* rows, uint32_t heads) {
    for (uint32_t t = 0; t < T; ++t) {
      const float* cs = &cosv[static_cast<size_t>(t) * half];
      const float* sn = &sinv[static_cast<size_t>(t) * half];
      for (uint32_t hh = 0; hh < heads; ++hh) {
        float* r = rows + (static_cast<size_t>(t) * heads + hh) * hd;
        for (uint32_t i = 0; i < half; ++i) {
          const float x0 = r[2 * i], x1 = r[2 * i + 1];
          r[2 * i] = DSub(DMul(x0, cs[i]), DMul(x1, sn[i]));
          r[2 * i + 1] = DAdd(DMul(x0, sn[i]), DMul(x1, cs[i]));
        }
        ToHalfSplit(r, hd, perm.data());
      }
    }
  };
  std::vector<float> q(static_cast<size_t>(T) * qd), k(static_cast<size_t>(T) * kvd), v(k.size());
  std::vector<float> att(q.size()), gate(static_cast<size_t>(T) * F), up(gate.size());
  auto norm = [&](const std::vector<float>& w) {
    h = x;
    for (uint32_t t = 0; t < T; ++t) ggml::RmsNormRow(&h[static_cast<size_t>(t) * D], D, w.data(), c.rms_eps);
    return QuantizeRows(h.data(), T, D);
  };
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Layer& N = layers_[l];
    const GgmlLayer& L = ggml_layers_[l];
    const bool last = l + 1 == c.n_layers;  // its queries and MLP feed no KV
    {
      const std::vector<ggml::BlockQ8_1> a = norm(N.attn_norm);
      GgmlProject(L.wk, a.data(), T, k.data());
      GgmlProject(L.wv, a.data(), T, v.data());
      if (!last) GgmlProject(L.wq, a.data(), T, q.data());
    }
    rope(k.data(), c.n_kv_heads);
    cache->k[l].insert(cache->k[l].end(), k.begin(), k.end());
    cache->v[l].insert(cache->v[l].end(), v.begin(), v.end());
    if (last) break;
    rope(q.data(), c.n_heads);
    GgmlAttention(l, first, T, q.data(), *cache, att.data());
    GgmlProject(L.wo, QuantizeRows(att.data(), T, qd).data(), T, tmp.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] = DAdd(x[i], tmp[i]);
    {
      const std::vector<ggml::BlockQ8_1> a = norm(N.ffn_norm);
      GgmlProject(L.w_gate, a.data(), T, gate.data());
      GgmlProject(L.w_up, a.data(), T, up.data());
    }
#if defined(__x86_64__)
    if (ggml_path_ != ggml::GgmlPath::kScalar) {
      avx2::SiluMul(gate.data(), up.data(), gate.size());  // the same bits, 8 lanes
    } else
#endif
    {
      for (size_t i = 0; i < gate.size(); ++i) gate[i] = DMul(spec::DetSilu(gate[i]), up[i]);
    }
    GgmlProject(L.w_down, QuantizeRows(gate.data(), T, F).data(), T, tmp.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] = DAdd(x[i], tmp[i]);
  }
  cache->tokens = first + T;
}

}  // namespace kvstash::model
