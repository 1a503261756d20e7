#include "model/hybrid/hybrid_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace kvstash::hybrid {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxDim = 1u << 20;  // far above any real model; keeps sizes sane

Status Positive(const json& j, const char* key, uint32_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 ||
      it->get<int64_t>() > static_cast<int64_t>(kMaxDim)) {
    return Status::InvalidArgument(std::string("config.json: '") + key +
                                   "' missing or not an integer in 1.." +
                                   std::to_string(kMaxDim));
  }
  *out = static_cast<uint32_t>(it->get<int64_t>());
  return Status::Ok();
}

Status Number(const json& j, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();  // keep the default
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0) {
    return Status::InvalidArgument(std::string("config.json: '") + key +
                                   "' is not a positive number");
  }
  *out = static_cast<float>(it->get<double>());
  return Status::Ok();
}

Result<HybridConfig> ParseText(const json& j) {
  HybridConfig c;
  KVSTASH_RETURN_IF_ERROR(Positive(j, "vocab_size", &c.vocab_size));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "hidden_size", &c.hidden_size));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "intermediate_size", &c.intermediate_size));
  uint32_t n_layers = 0;
  KVSTASH_RETURN_IF_ERROR(Positive(j, "num_hidden_layers", &n_layers));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "num_attention_heads", &c.num_attention_heads));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "num_key_value_heads", &c.num_key_value_heads));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "head_dim", &c.head_dim));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "linear_conv_kernel_dim", &c.conv_kernel));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "linear_num_key_heads", &c.num_k_heads));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "linear_num_value_heads", &c.num_v_heads));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "linear_key_head_dim", &c.head_k_dim));
  KVSTASH_RETURN_IF_ERROR(Positive(j, "linear_value_head_dim", &c.head_v_dim));
  KVSTASH_RETURN_IF_ERROR(Number(j, "rms_norm_eps", &c.rms_norm_eps));

  if (j.value("hidden_act", std::string("silu")) != "silu") {
    return Status::NotSupported("config.json: hidden_act other than silu");
  }
  if (j.value("attention_bias", false)) {
    return Status::NotSupported("config.json: attention_bias is not supported");
  }
  auto tie = j.find("tie_word_embeddings");
  if (tie != j.end()) {
    if (!tie->is_boolean()) {
      return Status::InvalidArgument("config.json: 'tie_word_embeddings' is not a boolean");
    }
    c.tie_word_embeddings = tie->get<bool>();
  }

  // RoPE: rope_parameters (transformers >= 5) or the older top-level keys.
  const json* rope = &j;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) rope = &*it;
  if (rope->value("rope_type", std::string("default")) != "default") {
    return Status::NotSupported("config.json: rope_type '" +
                                rope->value("rope_type", std::string()) +
                                "' (only default RoPE is implemented)");
  }
  KVSTASH_RETURN_IF_ERROR(Number(*rope, "rope_theta", &c.rope_theta));
  float factor = 0.25f;
  if (rope->contains("partial_rotary_factor")) {
    KVSTASH_RETURN_IF_ERROR(Number(*rope, "partial_rotary_factor", &factor));
  } else {
    KVSTASH_RETURN_IF_ERROR(Number(j, "partial_rotary_factor", &factor));
  }
  // transformers: dim = int(head_dim * partial_rotary_factor) (Python float product).
  const double rot = std::floor(static_cast<double>(c.head_dim) * static_cast<double>(factor));
  if (factor > 1.0f || rot < 2 || static_cast<uint64_t>(rot) % 2 != 0) {
    return Status::InvalidArgument(
        "config.json: head_dim * partial_rotary_factor must be an even number in 2..head_dim");
  }
  c.rotary_dim = static_cast<uint32_t>(rot);

  if (c.conv_kernel < 2) {
    return Status::InvalidArgument("config.json: linear_conv_kernel_dim must be at least 2");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Status::InvalidArgument(
        "config.json: num_attention_heads is not a multiple of num_key_value_heads");
  }
  if (c.num_v_heads % c.num_k_heads != 0) {
    return Status::InvalidArgument(
        "config.json: linear_num_value_heads is not a multiple of linear_num_key_heads");
  }

  auto types = j.find("layer_types");
  if (types != j.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != n_layers) {
      return Status::InvalidArgument(
          "config.json: 'layer_types' is not a list of num_hidden_layers entries");
    }
    for (const json& t : *types) {
      if (t == "linear_attention") {
        c.layer_types.push_back(LayerKind::kLinearAttention);
      } else if (t == "full_attention") {
        c.layer_types.push_back(LayerKind::kFullAttention);
      } else {
        return Status::InvalidArgument("config.json: unknown layer type " + t.dump());
      }
    }
  } else {
    uint32_t interval = 4;
    if (j.contains("full_attention_interval")) {
      KVSTASH_RETURN_IF_ERROR(Positive(j, "full_attention_interval", &interval));
    }
    for (uint32_t i = 0; i < n_layers; ++i) {
      c.layer_types.push_back((i + 1) % interval != 0 ? LayerKind::kLinearAttention
                                                      : LayerKind::kFullAttention);
    }
  }
  return c;
}

}  // namespace

uint32_t HybridConfig::num_attention_layers() const {
  uint32_t n = 0;
  for (LayerKind k : layer_types) n += k == LayerKind::kFullAttention;
  return n;
}

Result<HybridConfig> ParseHybridConfig(std::string_view json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument("config.json: not a JSON object");
  }
  const std::string type = j.value("model_type", std::string());
  if (type == "qwen3_5") {
    auto text = j.find("text_config");
    if (text == j.end() || !text->is_object()) {
      return Status::InvalidArgument("config.json: qwen3_5 without a text_config object");
    }
    return ParseText(*text);
  }
  if (type != "qwen3_5_text") {
    return Status::NotSupported("config.json: model_type '" + type +
                                "' is not supported (qwen3_5_text, qwen3_5)");
  }
  return ParseText(j);
}

}  // namespace kvstash::hybrid
