#include "codec/dckv/dckv_trained.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include "codec/dckv/dckv_correction.h"
#include "codec/dckv/safetensors.h"
#include "kvstash/prefix_key.h"
#include "kvstash/sha256.h"

namespace kvstash::dckv {
namespace {

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The file's tensors, each taken at most once; Remaining() lists the untaken ones.
class Tensors {
 public:
  explicit Tensors(SafetensorsFile file) : file_(std::move(file)) {}
  bool Has(const std::string& name) const { return file_.tensors.count(name) > 0; }
  // The values of `name`, which must have exactly `shape`.
  Result<std::vector<float>> Take(const std::string& name, const std::vector<uint64_t>& shape) {
    auto it = file_.tensors.find(name);
    if (it == file_.tensors.end())
      return Status::InvalidArgument("trained dckv file: missing tensor '" + name + "'");
    if (it->second.shape != shape) {
      return Status::InvalidArgument("trained dckv file: tensor '" + name + "' has shape " +
                                     ShapeText(it->second.shape) + ", expected " + ShapeText(shape));
    }
    taken_.insert(name);
    return std::move(it->second.values);
  }
  // The shape of `name` (REQUIRES Has(name)).
  const std::vector<uint64_t>& Shape(const std::string& name) const { return file_.tensors.at(name).shape; }
  std::string FirstUntaken() const {
    for (const auto& [name, t] : file_.tensors) {
      if (!taken_.count(name)) return name;
    }
    return "";
  }

 private:
  SafetensorsFile file_;
  std::set<std::string> taken_;
};

// One optional net `prefix`.{w1, b1, w2, b2} of inputs -> outputs: all four or none.
Result<DckvNet> TakeNet(Tensors& t, const std::string& prefix, uint64_t inputs, uint64_t outputs) {
  const std::string w1 = prefix + ".w1", b1 = prefix + ".b1", w2 = prefix + ".w2", b2 = prefix + ".b2";
  const int present = t.Has(w1) + t.Has(b1) + t.Has(w2) + t.Has(b2);
  if (present == 0) return DckvNet{};
  if (present != 4) {
    for (const auto& n : {w1, b1, w2, b2}) {
      if (!t.Has(n)) {
        return Status::InvalidArgument("trained dckv file: net '" + prefix + "' lacks tensor '" + n +
                                       "' (a net has all four of w1, b1, w2, b2 or none)");
      }
    }
  }
  const auto& s = t.Shape(w1);
  if (s.size() != 2 || s[0] == 0 || s[0] > kMaxCorrectionHidden) {
    return Status::InvalidArgument("trained dckv file: tensor '" + w1 + "' has shape " + ShapeText(s) +
                                   ", expected [H, " + std::to_string(inputs) +
                                   "] with 1 <= H <= " + std::to_string(kMaxCorrectionHidden));
  }
  const uint64_t h = s[0];
  DckvNet net;
  net.hidden = static_cast<uint32_t>(h);
  KVSTASH_ASSIGN_OR_RETURN(net.w1, t.Take(w1, {h, inputs}));
  KVSTASH_ASSIGN_OR_RETURN(net.b1, t.Take(b1, {h}));
  KVSTASH_ASSIGN_OR_RETURN(net.w2, t.Take(w2, {outputs, h}));
  KVSTASH_ASSIGN_OR_RETURN(net.b2, t.Take(b2, {outputs}));
  return net;
}

}  // namespace

Result<DckvTrainedTransform> TrainedDckvTransform(std::span<const uint8_t> trained,
                                                  std::span<const uint8_t> base) {
  auto file = ParseSafetensors(trained);
  if (!file.ok()) return file.status().WithContext("trained dckv file");
  DckvTrainedTransform out;
  out.metadata = file->metadata;
  const auto format = out.metadata.find("format");
  if (format == out.metadata.end() || format->second != kTrainedDckvFormat) {
    return Status::InvalidArgument(std::string("trained dckv file: __metadata__ format is not ") +
                                   kTrainedDckvFormat);
  }
  const auto sha = out.metadata.find("base_artifact_sha256");
  if (sha == out.metadata.end())
    return Status::InvalidArgument("trained dckv file: no base_artifact_sha256 in __metadata__");
  std::string want = sha->second;
  std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string have = ToHex(Sha256(base));
  if (want != have) {
    return Status::Mismatch("trained dckv file: trained from the base artifact " + sha->second +
                            ", but the given base artifact's SHA-256 is " + have);
  }
  auto parsed = DckvArtifact::Parse(base);
  if (!parsed.ok()) return parsed.status().WithContext("base artifact");
  const DckvArtifact& b = *parsed;
  Tensors t(std::move(*file));
  DckvArtifact& a = out.transform;
  a.n_layers = b.n_layers;
  a.n_kv_heads = b.n_kv_heads;
  a.head_dim = b.head_dim;
  a.rope_theta = b.rope_theta;
  a.group_layers = b.group_layers;
  a.raw_head = b.raw_head;
  a.raw_tail = b.raw_tail;
  a.target_ratio = b.target_ratio;
  a.conditioning = b.conditioning;
  for (size_t gi = 0; gi < b.groups.size(); ++gi) {
    const DckvGroup& bg = b.groups[gi];
    const std::string p = "group." + std::to_string(gi) + ".";
    const uint64_t dims = bg.dims;
    if (!t.Has(p + "encoder"))
      return Status::InvalidArgument("trained dckv file: missing tensor '" + p + "encoder'");
    const auto& es = t.Shape(p + "encoder");
    if (es.size() != 2 || es[1] != dims || es[0] > dims) {
      return Status::InvalidArgument("trained dckv file: tensor '" + p + "encoder' has shape " +
                                     ShapeText(es) + ", expected [n_active, " + std::to_string(dims) +
                                     "] with n_active <= " + std::to_string(dims));
    }
    const uint64_t na = es[0];
    DckvGroup g;
    g.first_layer = bg.first_layer;
    g.layers = bg.layers;
    g.dims = bg.dims;
    KVSTASH_ASSIGN_OR_RETURN(g.mean, t.Take(p + "mean", {dims}));
    for (float& v : g.mean) v += 0.0f;  // -0.0 -> +0.0, every other value unchanged
    KVSTASH_ASSIGN_OR_RETURN(g.encoder_basis, t.Take(p + "encoder", {na, dims}));
    KVSTASH_ASSIGN_OR_RETURN(g.basis, t.Take(p + "decoder", {na, dims}));
    KVSTASH_ASSIGN_OR_RETURN(g.step, t.Take(p + "step", {na}));
    for (size_t i = 0; i < g.step.size(); ++i) {
      if (!(g.step[i] > 0)) {
        return Status::InvalidArgument("trained dckv file: tensor '" + p +
                                       "step' has a value <= 0 at index " + std::to_string(i));
      }
    }
    KVSTASH_RETURN_IF_ERROR(t.Take(p + "scale", {na}).status());
    KVSTASH_ASSIGN_OR_RETURN(g.decoder_net, TakeNet(t, p + "decoder_net", na, dims));
    KVSTASH_ASSIGN_OR_RETURN(g.encoder_net, TakeNet(t, p + "encoder_net", dims, na));
    if (g.encoder_basis == g.basis) g.encoder_basis.clear();  // bit for bit equal: written without
    if (Status st = CheckCorrectionNets(g); !st.ok()) {
      return Status::InvalidArgument("trained dckv file: group " + std::to_string(gi) + ": " + st.message());
    }
    a.groups.push_back(std::move(g));
  }
  if (const std::string extra = t.FirstUntaken(); !extra.empty()) {
    return Status::InvalidArgument("trained dckv file: unexpected tensor '" + extra +
                                   "' (the base artifact has " + std::to_string(b.groups.size()) +
                                   " groups)");
  }
  return out;
}

}  // namespace kvstash::dckv
