#include "model/rwkv7/rwkv7_state.h"

#include <cstring>
#include <map>

namespace kvstash::rwkv7 {
namespace {

uint64_t WkvScalars(const Rwkv7Config& c) {
  return uint64_t{c.n_head} * c.head_size * c.head_size;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

StateTensor MakeTensor(std::string name, std::vector<uint64_t> shape,
                       const std::vector<float>& values) {
  StateTensor t;
  t.name = std::move(name);
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// Copies tensor `name` from `by_name` into `out` after checking dtype and shape.
Status TakeTensor(const std::map<std::string, const StateTensor*>& by_name,
                  const std::string& name, const std::vector<uint64_t>& shape,
                  std::vector<float>* out) {
  auto it = by_name.find(name);
  if (it == by_name.end()) return Status::InvalidArgument("rwkv7 state: missing " + name);
  const StateTensor& t = *it->second;
  if (t.dtype != DType::kF32) return Status::InvalidArgument("rwkv7 state: " + name + " not f32");
  if (t.shape != shape) return Status::InvalidArgument("rwkv7 state: " + name + " has wrong shape");
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  if (t.data.size() != n * sizeof(float)) {
    return Status::InvalidArgument("rwkv7 state: " + name + " data size mismatch");
  }
  out->resize(n);
  if (n > 0) std::memcpy(out->data(), t.data.data(), t.data.size());
  return Status::Ok();
}

}  // namespace

Rwkv7State Rwkv7State::Zeros(const Rwkv7Config& config) {
  Rwkv7State s;
  s.layers.resize(config.n_layer);
  for (Rwkv7LayerState& l : s.layers) {
    l.att_shift.assign(config.n_embd, 0.0f);
    l.ffn_shift.assign(config.n_embd, 0.0f);
    l.wkv.assign(WkvScalars(config), 0.0f);
  }
  return s;
}

Status Rwkv7State::CheckShape(const Rwkv7Config& config) const {
  if (layers.size() != config.n_layer) {
    return Status::InvalidArgument("rwkv7 state: " + std::to_string(layers.size()) +
                                   " layers, model has " + std::to_string(config.n_layer));
  }
  for (const Rwkv7LayerState& l : layers) {
    if (l.att_shift.size() != config.n_embd || l.ffn_shift.size() != config.n_embd ||
        l.wkv.size() != WkvScalars(config)) {
      return Status::InvalidArgument("rwkv7 state: vector sizes do not match the model");
    }
  }
  return Status::Ok();
}

bool Rwkv7State::BitEqual(const Rwkv7State& other) const {
  if (tokens != other.tokens || layers.size() != other.layers.size()) return false;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Rwkv7LayerState& a = layers[i];
    const Rwkv7LayerState& b = other.layers[i];
    if (!SameBits(a.att_shift, b.att_shift) || !SameBits(a.ffn_shift, b.ffn_shift) ||
        !SameBits(a.wkv, b.wkv)) {
      return false;
    }
  }
  return true;
}

std::string AttShiftName(uint32_t layer) { return "layers." + std::to_string(layer) + ".att_shift"; }
std::string FfnShiftName(uint32_t layer) { return "layers." + std::to_string(layer) + ".ffn_shift"; }
std::string WkvStateName(uint32_t layer) { return "layers." + std::to_string(layer) + ".wkv_state"; }

Result<RecurrentState> ExportState(const Rwkv7Config& config, const Rwkv7State& state) {
  KVSTASH_RETURN_IF_ERROR(state.CheckShape(config));
  RecurrentState out;
  out.boundary_tokens = state.tokens;
  out.tensors.reserve(3 * state.layers.size());
  const uint64_t c = config.n_embd, h = config.n_head, n = config.head_size;
  for (uint32_t l = 0; l < config.n_layer; ++l) {
    const Rwkv7LayerState& ls = state.layers[l];
    out.tensors.push_back(MakeTensor(AttShiftName(l), {c}, ls.att_shift));
    out.tensors.push_back(MakeTensor(FfnShiftName(l), {c}, ls.ffn_shift));
    out.tensors.push_back(MakeTensor(WkvStateName(l), {h, n, n}, ls.wkv));
  }
  return out;
}

Result<Rwkv7State> ImportState(const Rwkv7Config& config, const RecurrentState& state) {
  std::map<std::string, const StateTensor*> by_name;
  for (const StateTensor& t : state.tensors) {
    if (!by_name.emplace(t.name, &t).second) {
      return Status::InvalidArgument("rwkv7 state: duplicate tensor " + t.name);
    }
  }
  if (by_name.size() != 3ull * config.n_layer) {
    return Status::InvalidArgument("rwkv7 state: " + std::to_string(by_name.size()) +
                                   " tensors, expected " + std::to_string(3ull * config.n_layer));
  }
  Rwkv7State out;
  out.tokens = state.boundary_tokens;
  out.layers.resize(config.n_layer);
  const uint64_t c = config.n_embd, h = config.n_head, n = config.head_size;
  for (uint32_t l = 0; l < config.n_layer; ++l) {
    Rwkv7LayerState& ls = out.layers[l];
    KVSTASH_RETURN_IF_ERROR(TakeTensor(by_name, AttShiftName(l), {c}, &ls.att_shift));
    KVSTASH_RETURN_IF_ERROR(TakeTensor(by_name, FfnShiftName(l), {c}, &ls.ffn_shift));
    KVSTASH_RETURN_IF_ERROR(TakeTensor(by_name, WkvStateName(l), {h, n, n}, &ls.wkv));
  }
  return out;
}

}  // namespace kvstash::rwkv7
