#include "model/hybrid/hybrid_state.h"

#include <cstring>
#include <map>

namespace kvstash::hybrid {
namespace {

uint64_t ConvSize(const HybridConfig& c) { return uint64_t{c.conv_dim()} * (c.conv_kernel - 1); }
uint64_t DeltaSize(const HybridConfig& c) {
  return uint64_t{c.num_v_heads} * c.head_k_dim * c.head_v_dim;
}
uint64_t KvPerToken(const HybridConfig& c) { return uint64_t{c.num_key_value_heads} * c.head_dim; }

StateTensor F32Tensor(std::string name, std::vector<uint64_t> shape, const std::vector<float>& v) {
  StateTensor t;
  t.name = std::move(name);
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data.resize(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

}  // namespace

HybridState HybridState::Empty(const HybridConfig& config) {
  HybridState s;
  s.layers.resize(config.num_layers());
  for (uint32_t l = 0; l < config.num_layers(); ++l) {
    if (config.layer_types[l] == LayerKind::kLinearAttention) {
      s.layers[l].conv.assign(ConvSize(config), 0.0f);
      s.layers[l].delta.assign(DeltaSize(config), 0.0f);
    }
  }
  return s;
}

Status HybridState::CheckShape(const HybridConfig& config) const {
  if (layers.size() != config.num_layers()) {
    return Status::InvalidArgument("hybrid state: " + std::to_string(layers.size()) +
                                   " layers, the model has " +
                                   std::to_string(config.num_layers()));
  }
  const uint64_t kv = uint64_t{tokens} * KvPerToken(config);
  for (uint32_t l = 0; l < layers.size(); ++l) {
    const HybridLayerState& s = layers[l];
    const bool linear = config.layer_types[l] == LayerKind::kLinearAttention;
    const bool ok = linear ? (s.conv.size() == ConvSize(config) &&
                              s.delta.size() == DeltaSize(config) && s.keys.empty() &&
                              s.values.empty())
                           : (s.conv.empty() && s.delta.empty() && s.keys.size() == kv &&
                              s.values.size() == kv);
    if (!ok) {
      return Status::InvalidArgument("hybrid state: layer " + std::to_string(l) +
                                     " has the wrong sizes for its kind");
    }
  }
  return Status::Ok();
}

KvLayout HybridKvLayout(const HybridConfig& config) {
  return KvLayout{config.num_attention_layers(), config.num_key_value_heads, config.head_dim,
                  DType::kF32};
}

std::string ConvStateName(uint32_t layer) {
  return "layers." + std::to_string(layer) + ".conv_state";
}
std::string DeltaStateName(uint32_t layer) {
  return "layers." + std::to_string(layer) + ".delta_state";
}

Result<KvChunk> ExportKvChunk(const HybridConfig& config, const HybridState& state,
                              uint32_t begin, uint32_t end) {
  KVSTASH_RETURN_IF_ERROR(state.CheckShape(config));
  const KvLayout layout = HybridKvLayout(config);
  KVSTASH_RETURN_IF_ERROR(layout.Validate());
  if (begin >= end || end > state.tokens || end - begin > kMaxChunkTokens) {
    return Status::InvalidArgument("hybrid KV export: tokens [" + std::to_string(begin) + ", " +
                                   std::to_string(end) + ") not inside [0, " +
                                   std::to_string(state.tokens) + ")");
  }
  KvChunk chunk = KvChunk::Zeros(layout, end - begin);
  const uint64_t row = KvPerToken(config), bytes = (end - begin) * row * sizeof(float);
  uint32_t a = 0;
  for (uint32_t l = 0; l < config.num_layers(); ++l) {
    if (config.layer_types[l] != LayerKind::kFullAttention) continue;
    std::memcpy(chunk.MutableK(a).data(), state.layers[l].keys.data() + begin * row, bytes);
    std::memcpy(chunk.MutableV(a).data(), state.layers[l].values.data() + begin * row, bytes);
    ++a;
  }
  return chunk;
}

Result<RecurrentState> ExportRecurrentState(const HybridConfig& config,
                                            const HybridState& state) {
  KVSTASH_RETURN_IF_ERROR(state.CheckShape(config));
  RecurrentState out;
  out.boundary_tokens = state.tokens;
  for (uint32_t l = 0; l < config.num_layers(); ++l) {
    if (config.layer_types[l] != LayerKind::kLinearAttention) continue;
    out.tensors.push_back(F32Tensor(ConvStateName(l), {config.conv_dim(), config.conv_kernel - 1},
                                    state.layers[l].conv));
    out.tensors.push_back(F32Tensor(DeltaStateName(l),
                                    {config.num_v_heads, config.head_k_dim, config.head_v_dim},
                                    state.layers[l].delta));
  }
  return out;
}

Result<HybridState> ImportState(const HybridConfig& config, std::span<const KvChunk> chunks,
                                const RecurrentState& recurrent) {
  HybridState s = HybridState::Empty(config);
  s.tokens = recurrent.boundary_tokens;

  // KV: chunks in order covering [0, boundary) exactly.
  const KvLayout layout = HybridKvLayout(config);
  const uint64_t row = KvPerToken(config);
  uint64_t covered = 0;
  for (const KvChunk& c : chunks) {
    if (c.layout != layout) {
      return Status::InvalidArgument("hybrid import: a KV chunk has another layout than {" +
                                     std::to_string(layout.n_layers) + " layers, " +
                                     std::to_string(layout.n_kv_heads) + " heads, " +
                                     std::to_string(layout.head_dim) + ", f32}");
    }
    KVSTASH_RETURN_IF_ERROR(c.Validate());
    covered += c.tokens;
  }
  if (covered != s.tokens) {
    return Status::InvalidArgument("hybrid import: KV chunks hold " + std::to_string(covered) +
                                   " tokens, the recurrent state is at " +
                                   std::to_string(s.tokens));
  }
  uint32_t a = 0;
  for (uint32_t l = 0; l < config.num_layers(); ++l) {
    if (config.layer_types[l] != LayerKind::kFullAttention) continue;
    HybridLayerState& ls = s.layers[l];
    ls.keys.resize(s.tokens * row);
    ls.values.resize(s.tokens * row);
    uint64_t at = 0;
    for (const KvChunk& c : chunks) {
      const KvChunkView v = c.view();
      std::memcpy(ls.keys.data() + at * row, v.K(a).data(), v.K(a).size());
      std::memcpy(ls.values.data() + at * row, v.V(a).data(), v.V(a).size());
      at += c.tokens;
    }
    ++a;
  }

  // Recurrent tensors: exactly the expected names, any order.
  std::map<std::string, const StateTensor*> by_name;
  for (const StateTensor& t : recurrent.tensors) {
    if (!by_name.emplace(t.name, &t).second) {
      return Status::InvalidArgument("hybrid import: duplicate state tensor " + t.name);
    }
  }
  size_t used = 0;
  auto take = [&](const std::string& name, std::vector<uint64_t> shape,
                  std::vector<float>* dst) -> Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) return Status::InvalidArgument("hybrid import: missing " + name);
    const StateTensor& t = *it->second;
    if (t.dtype != DType::kF32 || t.shape != shape ||
        t.data.size() != dst->size() * sizeof(float)) {
      return Status::InvalidArgument("hybrid import: " + name +
                                     " is not f32 of the documented shape");
    }
    std::memcpy(dst->data(), t.data.data(), t.data.size());
    ++used;
    return Status::Ok();
  };
  for (uint32_t l = 0; l < config.num_layers(); ++l) {
    if (config.layer_types[l] != LayerKind::kLinearAttention) continue;
    KVSTASH_RETURN_IF_ERROR(
        take(ConvStateName(l), {config.conv_dim(), config.conv_kernel - 1}, &s.layers[l].conv));
    KVSTASH_RETURN_IF_ERROR(take(DeltaStateName(l),
                                 {config.num_v_heads, config.head_k_dim, config.head_v_dim},
                                 &s.layers[l].delta));
  }
  if (used != recurrent.tensors.size()) {
    return Status::InvalidArgument("hybrid import: " +
                                   std::to_string(recurrent.tensors.size() - used) +
                                   " unexpected state tensor(s)");
  }
  return s;
}

}  // namespace kvstash::hybrid
