// Hugging Face safetensors + config.json -> Model (see model_loader.h).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/formats/model_loader.h"
#include "model/formats/safetensors_reader.h"

namespace kvstash::model {
namespace {

namespace fs = std::filesystem;

Result<uint32_t> JsonU32(const nlohmann::json& j, const std::string& key) {
  if (!j.contains(key) || !j[key].is_number_unsigned() || j[key].get<uint64_t>() > UINT32_MAX) {
    return Status::InvalidArgument("config.json: '" + key + "' missing or not a non-negative integer");
  }
  return j[key].get<uint32_t>();
}

Result<float> JsonF32(const nlohmann::json& j, const std::string& key) {
  if (!j.contains(key) || !j[key].is_number()) {
    return Status::InvalidArgument("config.json: '" + key + "' missing or not a number");
  }
  return j[key].get<float>();
}

Result<ModelConfig> ParseConfig(const nlohmann::json& j) {
  ModelConfig c;
  const std::string type = j.value("model_type", "");
  if (type == "llama") {
    c.arch = Architecture::kLlama;
  } else if (type == "qwen3") {
    c.arch = Architecture::kQwen3;
  } else if (type == "qwen2") {
    c.arch = Architecture::kQwen2;  // q/k/v_proj.bias always present (Qwen2Attention)
  } else {
    return Status::NotSupported("config.json model_type '" + type +
                                "' is not supported (llama, qwen2, qwen3)");
  }
  KVSTASH_ASSIGN_OR_RETURN(c.n_layers, JsonU32(j, "num_hidden_layers"));
  KVSTASH_ASSIGN_OR_RETURN(c.hidden, JsonU32(j, "hidden_size"));
  KVSTASH_ASSIGN_OR_RETURN(c.ffn_hidden, JsonU32(j, "intermediate_size"));
  KVSTASH_ASSIGN_OR_RETURN(c.n_heads, JsonU32(j, "num_attention_heads"));
  c.n_kv_heads = c.n_heads;
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()) {
    KVSTASH_ASSIGN_OR_RETURN(c.n_kv_heads, JsonU32(j, "num_key_value_heads"));
  }
  KVSTASH_ASSIGN_OR_RETURN(c.vocab_size, JsonU32(j, "vocab_size"));
  if (c.n_heads == 0) return Status::InvalidArgument("config.json: num_attention_heads is 0");
  c.head_dim = c.hidden / c.n_heads;
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    KVSTASH_ASSIGN_OR_RETURN(c.head_dim, JsonU32(j, "head_dim"));
  }
  KVSTASH_ASSIGN_OR_RETURN(c.rms_eps, JsonF32(j, "rms_norm_eps"));
  // transformers < 5 writes rope_theta (+ rope_scaling); >= 5 writes rope_parameters.
  const nlohmann::json* rope = &j;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
  if (rope->contains("rope_theta")) {
    KVSTASH_ASSIGN_OR_RETURN(c.rope_theta, JsonF32(*rope, "rope_theta"));
  }
  const std::string rope_type = rope->value("rope_type", "default");
  const bool scaled = (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) || rope_type != "default";
  if (scaled) return Status::NotSupported("config.json: RoPE scaling is not supported");
  if (j.value("attention_bias", false) || j.value("mlp_bias", false)) {
    return Status::NotSupported("config.json: attention/MLP biases are not supported");
  }
  if (j.value("use_sliding_window", false)) return Status::NotSupported("config.json: sliding window");
  if (j.value("hidden_act", "silu") != "silu") return Status::NotSupported("config.json: hidden_act not silu");
  if (j.contains("max_position_embeddings")) {
    KVSTASH_ASSIGN_OR_RETURN(c.max_positions, JsonU32(j, "max_position_embeddings"));
  }
  c.tied_embeddings = j.value("tie_word_embeddings", false);
  KVSTASH_RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<std::unique_ptr<Linear>> Dense(const SafetensorsFile& f, const std::string& name, uint32_t out,
                                      uint32_t in) {
  KVSTASH_ASSIGN_OR_RETURN(auto w, f.ReadF32(name, {out, in}));
  return MakeDense(std::move(w), out, in, name);
}

}  // namespace

Result<std::unique_ptr<Model>> LoadSafetensorsModel(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  const fs::path weights = fs::is_directory(p, ec) ? dir / "model.safetensors" : p;
  std::ifstream in(dir / "config.json");
  if (!in) return Status::IOError("cannot read " + (dir / "config.json").string());
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("config.json is not a JSON object");
  KVSTASH_ASSIGN_OR_RETURN(ModelConfig c, ParseConfig(j));
  KVSTASH_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(weights.string()));

  auto m = std::make_unique<Model>();
  m->source = "safetensors";
  m->config = c;
  const uint32_t D = c.hidden;
  KVSTASH_ASSIGN_OR_RETURN(auto embed, f->ReadF32("model.embed_tokens.weight", {c.vocab_size, D}));
  m->embed = std::make_shared<const std::vector<float>>(std::move(embed));
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights w;
    KVSTASH_ASSIGN_OR_RETURN(w.attn_norm, f->ReadF32(p + "input_layernorm.weight", {D}));
    KVSTASH_ASSIGN_OR_RETURN(w.ffn_norm, f->ReadF32(p + "post_attention_layernorm.weight", {D}));
    KVSTASH_ASSIGN_OR_RETURN(w.wq, Dense(*f, p + "self_attn.q_proj.weight", c.q_dim(), D));
    KVSTASH_ASSIGN_OR_RETURN(w.wk, Dense(*f, p + "self_attn.k_proj.weight", c.kv_dim(), D));
    KVSTASH_ASSIGN_OR_RETURN(w.wv, Dense(*f, p + "self_attn.v_proj.weight", c.kv_dim(), D));
    KVSTASH_ASSIGN_OR_RETURN(w.wo, Dense(*f, p + "self_attn.o_proj.weight", D, c.q_dim()));
    KVSTASH_ASSIGN_OR_RETURN(w.w_gate, Dense(*f, p + "mlp.gate_proj.weight", c.ffn_hidden, D));
    KVSTASH_ASSIGN_OR_RETURN(w.w_up, Dense(*f, p + "mlp.up_proj.weight", c.ffn_hidden, D));
    KVSTASH_ASSIGN_OR_RETURN(w.w_down, Dense(*f, p + "mlp.down_proj.weight", D, c.ffn_hidden));
    if (c.qk_norm()) {
      KVSTASH_ASSIGN_OR_RETURN(w.q_norm, f->ReadF32(p + "self_attn.q_norm.weight", {c.head_dim}));
      KVSTASH_ASSIGN_OR_RETURN(w.k_norm, f->ReadF32(p + "self_attn.k_norm.weight", {c.head_dim}));
    }
    if (c.qkv_bias()) {
      KVSTASH_ASSIGN_OR_RETURN(w.bq, f->ReadF32(p + "self_attn.q_proj.bias", {c.q_dim()}));
      KVSTASH_ASSIGN_OR_RETURN(w.bk, f->ReadF32(p + "self_attn.k_proj.bias", {c.kv_dim()}));
      KVSTASH_ASSIGN_OR_RETURN(w.bv, f->ReadF32(p + "self_attn.v_proj.bias", {c.kv_dim()}));
    }
    m->layers.push_back(std::move(w));
  }
  KVSTASH_ASSIGN_OR_RETURN(m->final_norm, f->ReadF32("model.norm.weight", {D}));
  if (c.tied_embeddings || !f->Has("lm_head.weight")) {
    m->config.tied_embeddings = true;
    KVSTASH_ASSIGN_OR_RETURN(auto head, DenseLinear::Create(m->embed, c.vocab_size, D));
    m->lm_head = std::move(head);
  } else {
    KVSTASH_ASSIGN_OR_RETURN(m->lm_head, Dense(*f, "lm_head.weight", c.vocab_size, D));
  }
  KVSTASH_RETURN_IF_ERROR(m->Validate());
  return m;
}

}  // namespace kvstash::model
