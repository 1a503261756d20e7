#include "model/forward/model_config.h"

#include <cmath>

namespace kvstash::model {

std::string_view ArchitectureName(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "llama";
    case Architecture::kQwen3: return "qwen3";
    case Architecture::kQwen2:
      return "qwen2";
  }
  return "unknown";
}

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("model config: " + m); };
  if (n_layers == 0 || n_layers > kMaxLayers) return bad("n_layers " + std::to_string(n_layers));
  for (auto [name, v] : {std::pair{"hidden", hidden}, {"n_heads", n_heads}, {"n_kv_heads", n_kv_heads},
                         {"head_dim", head_dim}, {"ffn_hidden", ffn_hidden}}) {
    if (v == 0 || v > kMaxWidth) return bad(std::string(name) + " " + std::to_string(v));
  }
  if (vocab_size == 0 || vocab_size > kMaxVocab) return bad("vocab_size " + std::to_string(vocab_size));
  if (n_heads % n_kv_heads != 0) return bad("n_heads is not a multiple of n_kv_heads");
  if (head_dim % 2 != 0) return bad("head_dim must be even for RoPE");
  if (static_cast<uint64_t>(n_heads) * head_dim > kMaxWidth) return bad("n_heads * head_dim too large");
  if (!std::isfinite(rope_theta) || rope_theta <= 1.0f) return bad("rope_theta must be > 1");
  if (!std::isfinite(rms_eps) || rms_eps <= 0.0f) return bad("rms_eps must be > 0");
  return Status::Ok();
}

std::string ModelConfig::ToString() const {
  return std::string(ArchitectureName(arch)) + ": layers=" + std::to_string(n_layers) +
         " hidden=" + std::to_string(hidden) + " heads=" + std::to_string(n_heads) +
         " kv_heads=" + std::to_string(n_kv_heads) + " head_dim=" + std::to_string(head_dim) +
         " ffn=" + std::to_string(ffn_hidden) + " vocab=" + std::to_string(vocab_size) +
         " rope_theta=" + std::to_string(rope_theta) + " eps=" + std::to_string(rms_eps) +
         (tied_embeddings ? " tied" : "");
}

}  // namespace kvstash::model
