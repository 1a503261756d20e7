#include "model/forward/model.h"

#include <cstring>

namespace kvstash::model {
namespace {

Status CheckLinear(const std::unique_ptr<Linear>& w, uint32_t out, uint32_t in, const std::string& what) {
  if (w == nullptr || w->out_features() != out || w->in_features() != in) {
    return Status::InvalidArgument(what + " must be [" + std::to_string(out) + ", " + std::to_string(in) + "]");
  }
  return Status::Ok();
}

Status CheckVec(const std::vector<float>& v, uint32_t n, const std::string& what) {
  if (v.size() != n) {
    return Status::InvalidArgument(what + " has " + std::to_string(v.size()) + " values, want " +
                                   std::to_string(n));
  }
  return Status::Ok();
}

}  // namespace

Status Model::Validate() const {
  const ModelConfig& c = config;
  KVSTASH_RETURN_IF_ERROR(c.Validate());
  if (embed == nullptr || embed->size() != static_cast<uint64_t>(c.vocab_size) * c.hidden) {
    return Status::InvalidArgument("token embedding must be [vocab, hidden]");
  }
  if (layers.size() != c.n_layers) return Status::InvalidArgument("layer count disagrees with config");
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerWeights& w = layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    KVSTASH_RETURN_IF_ERROR(CheckVec(w.attn_norm, c.hidden, p + "attn_norm"));
    KVSTASH_RETURN_IF_ERROR(CheckVec(w.ffn_norm, c.hidden, p + "ffn_norm"));
    KVSTASH_RETURN_IF_ERROR(CheckLinear(w.wq, c.q_dim(), c.hidden, p + "wq"));
    KVSTASH_RETURN_IF_ERROR(CheckLinear(w.wk, c.kv_dim(), c.hidden, p + "wk"));
    KVSTASH_RETURN_IF_ERROR(CheckLinear(w.wv, c.kv_dim(), c.hidden, p + "wv"));
    KVSTASH_RETURN_IF_ERROR(CheckLinear(w.wo, c.hidden, c.q_dim(), p + "wo"));
    KVSTASH_RETURN_IF_ERROR(CheckLinear(w.w_gate, c.ffn_hidden, c.hidden, p + "w_gate"));
    KVSTASH_RETURN_IF_ERROR(CheckLinear(w.w_up, c.ffn_hidden, c.hidden, p + "w_up"));
    KVSTASH_RETURN_IF_ERROR(CheckLinear(w.w_down, c.hidden, c.ffn_hidden, p + "w_down"));
    const uint32_t qk = c.qk_norm() ? c.head_dim : 0;
    KVSTASH_RETURN_IF_ERROR(CheckVec(w.q_norm, qk, p + "q_norm"));
    KVSTASH_RETURN_IF_ERROR(CheckVec(w.k_norm, qk, p + "k_norm"));
    const bool bias = c.qkv_bias();
    KVSTASH_RETURN_IF_ERROR(CheckVec(w.bq, bias ? c.q_dim() : 0, p + "bq"));
    KVSTASH_RETURN_IF_ERROR(CheckVec(w.bk, bias ? c.kv_dim() : 0, p + "bk"));
    KVSTASH_RETURN_IF_ERROR(CheckVec(w.bv, bias ? c.kv_dim() : 0, p + "bv"));
  }
  KVSTASH_RETURN_IF_ERROR(CheckVec(final_norm, c.hidden, "final_norm"));
  KVSTASH_RETURN_IF_ERROR(CheckLinear(lm_head, c.vocab_size, c.hidden, "lm_head"));
  if (tokenizer != nullptr && tokenizer->vocab_size() > c.vocab_size) {
    return Status::InvalidArgument("tokenizer has more tokens than the model's vocabulary");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Linear>> MakeDense(std::vector<float> w, uint32_t out, uint32_t in,
                                          const std::string& what) {
  auto r = DenseLinear::Create(std::make_shared<const std::vector<float>>(std::move(w)), out, in);
  if (!r.ok()) return r.status().WithContext(what);
  return std::unique_ptr<Linear>(std::move(r).value());
}

std::vector<float> InterleavedToHalfSplit(const std::vector<float>& w, uint32_t n_heads, uint32_t head_dim,
                                          uint32_t in) {
  std::vector<float> out(w.size());
  const uint32_t half = head_dim / 2;
  for (uint32_t h = 0; h < n_heads; ++h) {
    for (uint32_t j = 0; j < 2; ++j) {
      for (uint32_t i = 0; i < half; ++i) {
        const uint64_t dst = static_cast<uint64_t>(h) * head_dim + j * half + i;
        const uint64_t src = static_cast<uint64_t>(h) * head_dim + 2 * i + j;
        std::memcpy(&out[dst * in], &w[src * in], in * sizeof(float));
      }
    }
  }
  return out;
}

}  // namespace kvstash::model
