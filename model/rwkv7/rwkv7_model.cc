// Loading: maps the named tensors of an rwkv.cpp file onto Rwkv7Model::Weights,
// checking each shape. The forward pass is in rwkv7_forward.cc.
#include "kvstash/sha256.h"

#include <set>
#include <string>

#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv7_weights.h"
#include "model/rwkv7/rwkv_file.h"

namespace kvstash::rwkv7 {
namespace {

// Fetches tensors by name with shape checks and remembers which were used, so that
// an unexpected tensor (an RWKV variant we would silently misread) is reported.
class TensorSource {
 public:
  explicit TensorSource(const RwkvFile& file) : file_(file) {}

  bool Has(const std::string& name) const { return file_.Find(name) != nullptr; }

  // The dims of a tensor, or Corruption if it is missing.
  Result<std::vector<uint64_t>> Dims(const std::string& name) const {
    const RwkvFileTensor* t = file_.Find(name);
    if (t == nullptr) return Status::Corruption("rwkv7 model: missing tensor " + name);
    return t->dims;
  }

  // A tensor whose dims must be exactly `dims`.
  Status Get(const std::string& name, const std::vector<uint64_t>& dims, std::vector<float>* out) {
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint64_t> have, Dims(name));
    if (have != dims) return BadShape(name, have);
    return Take(name, out);
  }

  // A vector of n values: dims {n} optionally followed by unit dims ({n, 1, 1}).
  Status Vector(const std::string& name, uint64_t n, std::vector<float>* out) {
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint64_t> have, Dims(name));
    bool ok = have[0] == n;
    for (size_t i = 1; i < have.size(); ++i) ok = ok && have[i] == 1;
    if (!ok) return BadShape(name, have);
    return Take(name, out);
  }

  // Names present in the file but never taken.
  std::vector<std::string> Unused() const {
    std::vector<std::string> out;
    for (const RwkvFileTensor& t : file_.tensors) {
      if (used_.count(t.name) == 0) out.push_back(t.name);
    }
    return out;
  }

 private:
  Status Take(const std::string& name, std::vector<float>* out) {
    KVSTASH_ASSIGN_OR_RETURN(*out, file_.Find(name)->ToF32());
    used_.insert(name);
    return Status::Ok();
  }
  static Status BadShape(const std::string& name, const std::vector<uint64_t>& have) {
    std::string dims;
    for (uint64_t d : have) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    return Status::Corruption("rwkv7 model: tensor " + name + " has unexpected dims {" + dims + "}");
  }

  const RwkvFile& file_;
  std::set<std::string> used_;
};

// The rank D of a LoRA down-projection stored with dims {C, D}.
Result<uint32_t> LoraRank(const TensorSource& src, const std::string& name, uint64_t c) {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint64_t> d, src.Dims(name));
  if (d.size() != 2 || d[0] != c) {
    return Status::Corruption("rwkv7 model: tensor " + name + " is not a {C, rank} LoRA");
  }
  return static_cast<uint32_t>(d[1]);
}

// Splits x_rwkvag (six rows of C: r, w, k, v, a, g) into the layer's mix vectors.
Status LoadMixes(TensorSource& src, const std::string& name, uint64_t c, Rwkv7LayerWeights* lw) {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint64_t> d, src.Dims(name));
  bool ok = d.size() >= 2 && d[0] == c && d.back() == 6;
  for (size_t i = 1; i + 1 < d.size(); ++i) ok = ok && d[i] == 1;
  if (!ok) return Status::Corruption("rwkv7 model: tensor " + name + " is not {C, 1, 6}");
  std::vector<float> all;
  KVSTASH_RETURN_IF_ERROR(src.Get(name, d, &all));
  std::vector<float>* rows[6] = {&lw->x_r, &lw->x_w, &lw->x_k, &lw->x_v, &lw->x_a, &lw->x_g};
  for (size_t i = 0; i < 6; ++i) rows[i]->assign(all.begin() + i * c, all.begin() + (i + 1) * c);
  return Status::Ok();
}

Status LoadLayer(TensorSource& src, const Rwkv7Config& cfg, uint32_t l, Rwkv7LayerWeights* lw) {
  const std::string p = "blocks." + std::to_string(l) + ".";
  const uint64_t c = cfg.n_embd;
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "ln1.weight", c, &lw->ln1_w));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "ln1.bias", c, &lw->ln1_b));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "ln2.weight", c, &lw->ln2_w));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "ln2.bias", c, &lw->ln2_b));
  KVSTASH_RETURN_IF_ERROR(LoadMixes(src, p + "att.x_rwkvag", c, lw));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "att.w0", c, &lw->w0));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.w1", {c, cfg.decay_lora}, &lw->w1));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.w2", {cfg.decay_lora, c}, &lw->w2));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "att.a0", c, &lw->a0));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.a1", {c, cfg.iclr_lora}, &lw->a1));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.a2", {cfg.iclr_lora, c}, &lw->a2));
  if (l > 0) {
    KVSTASH_RETURN_IF_ERROR(src.Vector(p + "att.v0", c, &lw->v0));
    KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.v1", {c, cfg.value_lora}, &lw->v1));
    KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.v2", {cfg.value_lora, c}, &lw->v2));
  }
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.g1", {c, cfg.gate_lora}, &lw->g1));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.g2", {cfg.gate_lora, c}, &lw->g2));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "att.k_k", c, &lw->k_k));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "att.k_a", c, &lw->k_a));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.r_k", {cfg.head_size, cfg.n_head}, &lw->r_k));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.receptance.weight", {c, c}, &lw->receptance));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.key.weight", {c, c}, &lw->key));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.value.weight", {c, c}, &lw->value));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "att.output.weight", {c, c}, &lw->output));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "att.ln_x.weight", c, &lw->ln_x_w));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "att.ln_x.bias", c, &lw->ln_x_b));
  KVSTASH_RETURN_IF_ERROR(src.Vector(p + "ffn.x_k", c, &lw->ffn_x_k));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "ffn.key.weight", {c, cfg.ffn_dim}, &lw->ffn_key));
  KVSTASH_RETURN_IF_ERROR(src.Get(p + "ffn.value.weight", {cfg.ffn_dim, c}, &lw->ffn_value));
  return Status::Ok();
}

// Reads the shape of the model from the tensors of the file (the header only gives
// vocab, embedding and layer count, which must agree).
Result<Rwkv7Config> ReadConfig(const RwkvFile& file, const TensorSource& src) {
  if (!src.Has("blocks.0.att.x_rwkvag") || !src.Has("blocks.0.att.r_k")) {
    return Status::NotSupported(
        "rwkv7 model: not an RWKV-7 file (no blocks.0.att.x_rwkvag / r_k; v4, v5 and v6 "
        "files are not supported)");
  }
  Rwkv7Config cfg;
  cfg.n_vocab = file.header.n_vocab;
  cfg.n_embd = file.header.n_embd;
  cfg.n_layer = file.header.n_layer;
  const uint64_t c = cfg.n_embd;
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint64_t> rk, src.Dims("blocks.0.att.r_k"));
  if (rk.size() != 2 || rk[0] * rk[1] != c) {
    return Status::Corruption("rwkv7 model: blocks.0.att.r_k is not {head_size, n_head}");
  }
  cfg.head_size = static_cast<uint32_t>(rk[0]);
  cfg.n_head = static_cast<uint32_t>(rk[1]);
  KVSTASH_ASSIGN_OR_RETURN(cfg.decay_lora, LoraRank(src, "blocks.0.att.w1", c));
  KVSTASH_ASSIGN_OR_RETURN(cfg.iclr_lora, LoraRank(src, "blocks.0.att.a1", c));
  KVSTASH_ASSIGN_OR_RETURN(cfg.gate_lora, LoraRank(src, "blocks.0.att.g1", c));
  if (cfg.n_layer > 1) {
    KVSTASH_ASSIGN_OR_RETURN(cfg.value_lora, LoraRank(src, "blocks.1.att.v1", c));
  }
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint64_t> fk, src.Dims("blocks.0.ffn.key.weight"));
  if (fk.size() != 2 || fk[0] != c) {
    return Status::Corruption("rwkv7 model: blocks.0.ffn.key.weight is not {C, ffn_dim}");
  }
  cfg.ffn_dim = static_cast<uint32_t>(fk[1]);
  return cfg;
}

}  // namespace

Rwkv7Model::Rwkv7Model(Rwkv7Config config, Digest256 fingerprint, std::unique_ptr<Weights> weights)
    : config_(config), fingerprint_(fingerprint), weights_(std::move(weights)) {}
Rwkv7Model::Rwkv7Model(Rwkv7Model&&) noexcept = default;
Rwkv7Model& Rwkv7Model::operator=(Rwkv7Model&&) noexcept = default;
Rwkv7Model::~Rwkv7Model() = default;

const Rwkv7Config& Rwkv7Model::config() const { return config_; }
const Digest256& Rwkv7Model::fingerprint() const { return fingerprint_; }

Result<Rwkv7Model> Rwkv7Model::FromBytes(std::span<const uint8_t> bytes) {
  KVSTASH_ASSIGN_OR_RETURN(RwkvFile file, ParseRwkvFile(bytes));
  TensorSource src(file);
  KVSTASH_ASSIGN_OR_RETURN(Rwkv7Config cfg, ReadConfig(file, src));
  auto w = std::make_unique<Weights>();
  const uint64_t c = cfg.n_embd, v = cfg.n_vocab;
  KVSTASH_RETURN_IF_ERROR(src.Get("emb.weight", {c, v}, &w->emb));
  KVSTASH_RETURN_IF_ERROR(src.Vector("blocks.0.ln0.weight", c, &w->ln0_w));
  KVSTASH_RETURN_IF_ERROR(src.Vector("blocks.0.ln0.bias", c, &w->ln0_b));
  w->layers.resize(cfg.n_layer);
  for (uint32_t l = 0; l < cfg.n_layer; ++l) {
    KVSTASH_RETURN_IF_ERROR(LoadLayer(src, cfg, l, &w->layers[l]));
  }
  KVSTASH_RETURN_IF_ERROR(src.Vector("ln_out.weight", c, &w->ln_out_w));
  KVSTASH_RETURN_IF_ERROR(src.Vector("ln_out.bias", c, &w->ln_out_b));
  KVSTASH_RETURN_IF_ERROR(src.Get("head.weight", {c, v}, &w->head));
  if (std::vector<std::string> extra = src.Unused(); !extra.empty()) {
    return Status::Corruption("rwkv7 model: unexpected tensor " + extra.front() + " (and " +
                              std::to_string(extra.size() - 1) + " more)");
  }
  return Rwkv7Model(cfg, Sha256(bytes), std::move(w));
}

Result<Rwkv7Model> Rwkv7Model::Load(const std::string& path) {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path));
  return FromBytes(bytes);
}

}  // namespace kvstash::rwkv7
