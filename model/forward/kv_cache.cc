#include "model/forward/kv_cache.h"

#include <string>

namespace kvstash::model {

KvCache KvCache::ForModel(const ModelConfig& c) {
  KvCache kv;
  kv.n_layers = c.n_layers;
  kv.n_kv_heads = c.n_kv_heads;
  kv.head_dim = c.head_dim;
  kv.k.resize(c.n_layers);
  kv.v.resize(c.n_layers);
  return kv;
}

Status KvCache::CheckFor(const ModelConfig& c) const {
  if (n_layers != c.n_layers || n_kv_heads != c.n_kv_heads || head_dim != c.head_dim) {
    return Status::InvalidArgument("KV cache shape (" + std::to_string(n_layers) + " layers, " +
                                   std::to_string(n_kv_heads) + " kv heads, head_dim " +
                                   std::to_string(head_dim) + ") does not match the model");
  }
  if (k.size() != n_layers || v.size() != n_layers) {
    return Status::InvalidArgument("KV cache holds a wrong number of layers");
  }
  const uint64_t want = tokens * RowFloats();
  for (uint32_t l = 0; l < n_layers; ++l) {
    if (k[l].size() != want || v[l].size() != want) {
      return Status::InvalidArgument("KV cache layer " + std::to_string(l) + " does not hold " +
                                     std::to_string(tokens) + " tokens");
    }
  }
  return Status::Ok();
}

Result<KvCache> KvCache::Prefix(uint32_t n) const {
  if (n > tokens) {
    return Status::InvalidArgument("prefix of " + std::to_string(n) + " tokens from a cache of " +
                                   std::to_string(tokens));
  }
  KvCache out = *this;
  out.tokens = n;
  for (uint32_t l = 0; l < n_layers; ++l) {
    out.k[l].resize(n * RowFloats());
    out.v[l].resize(n * RowFloats());
  }
  return out;
}

}  // namespace kvstash::model
