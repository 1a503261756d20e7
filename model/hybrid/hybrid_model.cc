// Loading of hybrid models: config.json + model.safetensors -> HybridModel.
#include "model/hybrid/hybrid_model.h"

#include <openssl/evp.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "model/hybrid/hybrid_weights.h"
#include "common/mapped_file.h"
#include "model/formats/safetensors_reader.h"

namespace kvstash::hybrid {
namespace {

using model::SafetensorsFile;

// Reads checkpoint tensors by name under a prefix, remembering which were used.
class TensorSource {
 public:
  explicit TensorSource(const SafetensorsFile& file) : file_(file) {}

  // fp32 copy of tensor `full`; Corruption when absent or of another shape.
  Status Get(const std::string& full, const std::vector<uint64_t>& shape,
             std::vector<float>* out) {
    auto it = file_.tensors().find(full);
    if (it == file_.tensors().end()) {
      return Status::Corruption("hybrid model: tensor " + full + " is missing");
    }
    if (it->second.shape != shape) {
      std::string want;
      for (uint64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      return Status::Corruption("hybrid model: tensor " + full + " is not of shape [" + want +
                                "]");
    }
    auto v = file_.ReadF32(full, shape);
    if (!v.ok()) return v.status().WithContext("hybrid model: tensor " + full);
    *out = std::move(*v);
    used_.insert(full);
    return Status::Ok();
  }

  // Tensors never read, other than the ignored families.
  std::vector<std::string> Unused() const {
    std::vector<std::string> out;
    for (const auto& [name, info] : file_.tensors()) {
      if (used_.count(name) || name.rfind("mtp.", 0) == 0 || name.rfind("model.visual.", 0) == 0) {
        continue;
      }
      out.push_back(name);
    }
    return out;
  }

 private:
  const SafetensorsFile& file_;
  std::set<std::string> used_;
};

Status LoadLinear(TensorSource& src, const HybridConfig& c, const std::string& p,
                  LinearAttnWeights* w) {
  const uint64_t d = c.hidden_size, nv = c.num_v_heads;
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "in_proj_qkv.weight", {c.conv_dim(), d}, &w->in_proj_qkv));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "in_proj_z.weight", {c.value_dim(), d}, &w->in_proj_z));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "in_proj_b.weight", {nv, d}, &w->in_proj_b));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "in_proj_a.weight", {nv, d}, &w->in_proj_a));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, &w->conv));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "dt_bias", {nv}, &w->dt_bias));
  std::vector<float> a_log;
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "A_log", {nv}, &a_log));
  w->neg_a.resize(nv);
  for (uint64_t h = 0; h < nv; ++h) w->neg_a[h] = -std::exp(a_log[h]);
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "norm.weight", {c.head_v_dim}, &w->norm));
  return src.Get(p + "out_proj.weight", {d, c.value_dim()}, &w->out_proj);
}

Status LoadAttention(TensorSource& src, const HybridConfig& c, const std::string& p,
                     AttnWeights* w) {
  const uint64_t d = c.hidden_size, hd = c.head_dim;
  const uint64_t q = uint64_t{c.num_attention_heads} * hd, kv = uint64_t{c.num_key_value_heads} * hd;
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "q_proj.weight", {2 * q, d}, &w->q_proj));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "k_proj.weight", {kv, d}, &w->k_proj));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "v_proj.weight", {kv, d}, &w->v_proj));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "o_proj.weight", {d, q}, &w->o_proj));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "q_norm.weight", {hd}, &w->q_norm));
  return src.Get(p + "k_norm.weight", {hd}, &w->k_norm);
}

Status LoadLayer(TensorSource& src, const HybridConfig& c, const std::string& base, uint32_t l,
                 LayerWeights* w) {
  const std::string p = base + "layers." + std::to_string(l) + ".";
  const uint64_t d = c.hidden_size, i = c.intermediate_size;
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "input_layernorm.weight", {d}, &w->input_norm));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "post_attention_layernorm.weight", {d}, &w->post_norm));
  if (c.layer_types[l] == LayerKind::kLinearAttention) {
    KVSTASH_RETURN_IF_ERROR(LoadLinear(src, c, p + "linear_attn.", &w->linear));
  } else {
    KVSTASH_RETURN_IF_ERROR(LoadAttention(src, c, p + "self_attn.", &w->attn));
  }
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "mlp.gate_proj.weight", {i, d}, &w->gate_proj));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "mlp.up_proj.weight", {i, d}, &w->up_proj));
  return src.Get(p + "mlp.down_proj.weight", {d, i}, &w->down_proj);
}

// transformers' default RoPE: inv_freq = 1 / theta^(arange(0, r, 2) / r), fp32.
std::vector<float> InvFreq(const HybridConfig& c) {
  std::vector<float> f(c.rotary_dim / 2);
  for (uint32_t i = 0; i < f.size(); ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(c.rotary_dim);
    f[i] = 1.0f / std::pow(c.rope_theta, e);
  }
  return f;
}

Result<Digest256> Fingerprint(std::span<const uint8_t> config, std::span<const uint8_t> weights) {
  Digest256 d{};
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, config.data(), config.size()) == 1 &&
                  EVP_DigestUpdate(ctx, weights.data(), weights.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, d.data(), &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) return Status::Internal("hybrid model: SHA-256 failed");
  return d;
}

}  // namespace

HybridModel::HybridModel(HybridConfig config, Digest256 fingerprint, std::unique_ptr<Weights> weights)
    : config_(std::move(config)), fingerprint_(fingerprint), weights_(std::move(weights)) {}
HybridModel::HybridModel(HybridModel&&) noexcept = default;
HybridModel& HybridModel::operator=(HybridModel&&) noexcept = default;
HybridModel::~HybridModel() = default;

Result<HybridModel> HybridModel::Load(const std::string& dir) {
  return LoadFiles(dir + "/config.json", dir + "/model.safetensors");
}

Result<HybridModel> HybridModel::LoadFiles(const std::string& config_path,
                                           const std::string& safetensors_path) {
  KVSTASH_ASSIGN_OR_RETURN(auto config_file, MappedFile::Open(config_path));
  const auto cb = config_file->bytes();
  KVSTASH_ASSIGN_OR_RETURN(
      HybridConfig cfg,
      ParseHybridConfig(std::string_view(reinterpret_cast<const char*>(cb.data()), cb.size())));
  auto st = SafetensorsFile::Open(safetensors_path);
  if (!st.ok()) return st.status().WithContext("hybrid model: " + safetensors_path);
  const SafetensorsFile& file = **st;

  // Text-only checkpoints name tensors "model.*"; full Qwen3.5 checkpoints
  // "model.language_model.*" (lm_head stays at the top level).
  const std::string base =
      file.Has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  TensorSource src(file);
  auto w = std::make_unique<Weights>();
  const uint64_t d = cfg.hidden_size, v = cfg.vocab_size;
  KVSTASH_RETURN_IF_ERROR(src.Get(base + "embed_tokens.weight", {v, d}, &w->embed));
  w->layers.resize(cfg.num_layers());
  for (uint32_t l = 0; l < cfg.num_layers(); ++l) {
    KVSTASH_RETURN_IF_ERROR(LoadLayer(src, cfg, base, l, &w->layers[l]));
  }
  KVSTASH_RETURN_IF_ERROR(src.Get(base + "norm.weight", {d}, &w->norm));
  if (cfg.tie_word_embeddings && !file.Has("lm_head.weight")) {
    w->lm_head = w->embed;
  } else {
    KVSTASH_RETURN_IF_ERROR(src.Get("lm_head.weight", {v, d}, &w->lm_head));
  }
  if (std::vector<std::string> extra = src.Unused(); !extra.empty()) {
    return Status::Corruption("hybrid model: unexpected tensor " + extra.front() + " (and " +
                              std::to_string(extra.size() - 1) + " more)");
  }
  w->inv_freq = InvFreq(cfg);

  KVSTASH_ASSIGN_OR_RETURN(auto weights_file, MappedFile::Open(safetensors_path));
  KVSTASH_ASSIGN_OR_RETURN(Digest256 fp, Fingerprint(cb, weights_file->bytes()));
  return HybridModel(std::move(cfg), fp, std::move(w));
}

}  // namespace kvstash::hybrid
