#include "codec/spec/spec_state_artifact.h"

#include <cmath>
#include <cstring>

#include "codec/entropy/table_builder.h"
#include "codec/spec/spec_state_symbols.h"
#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash::spec {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'S', 'S'};
constexpr uint16_t kVersion = 1;

// The scalars of an f32 tensor as bit patterns.
std::vector<uint32_t> TensorBits(const StateTensor& t) {
  std::vector<uint32_t> bits(t.data.size() / 4);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = LoadLe<uint32_t>(t.data.data() + 4 * i);
  return bits;
}

// ScaleQuarterOctaves of a predicted tensor.
std::vector<int32_t> Scales(const StateTensor& t, const std::vector<uint32_t>& bits) {
  std::vector<int32_t> s(bits.size());
  ScaleQuarterOctaves(bits.data(), bits.size(), t.shape.data(), t.shape.size(), s.data());
  return s;
}

}  // namespace

Status CheckSameStateShape(const RecurrentState& a, const RecurrentState& b) {
  if (a.tensors.size() != b.tensors.size()) {
    return Status::InvalidArgument("spec state: exact and predicted states differ in tensor count");
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const StateTensor& x = a.tensors[i];
    const StateTensor& y = b.tensors[i];
    KVSTASH_RETURN_IF_ERROR(x.Validate());
    KVSTASH_RETURN_IF_ERROR(y.Validate());
    if (x.name != y.name || x.shape != y.shape || x.dtype != y.dtype) {
      return Status::InvalidArgument("spec state: tensor " + std::to_string(i) + " ('" + x.name +
                                     "' vs '" + y.name + "') differs in name, dtype or shape");
    }
    if (x.dtype != DType::kF32) {
      return Status::InvalidArgument("spec state: tensor '" + x.name + "' is not f32");
    }
  }
  return Status::Ok();
}

Result<SpecStateArtifact> SpecStateArtifact::Create(
    std::map<std::string, int32_t> offsets4, int32_t default_offset4,
    std::shared_ptr<const entropy::TableSet> tables) {
  if (tables == nullptr || tables->size() != static_cast<size_t>(kStateTables) ||
      tables->symbol_bits() != kStateTokenBits) {
    return Status::InvalidArgument("spec state artifact: need 66 tables of 8-bit symbols");
  }
  for (const auto& [name, off] : offsets4) {
    if (name.empty() || name.size() > 255) {
      return Status::InvalidArgument("spec state artifact: tensor name of 0 or > 255 bytes");
    }
  }
  SpecStateArtifact a;
  a.offsets4_ = std::move(offsets4);
  a.default_offset4_ = default_offset4;
  a.tables_ = std::move(tables);
  a.digest_ = Xxh3_64(a.Serialize());
  return a;
}

std::vector<uint8_t> SpecStateArtifact::Serialize() const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.Bytes(std::span<const uint8_t>(kMagic, 4));
  w.U16(kVersion);
  w.U16(0);
  w.U32(static_cast<uint32_t>(default_offset4_));
  w.U32(static_cast<uint32_t>(offsets4_.size()));
  for (const auto& [name, off] : offsets4_) {
    w.U16(static_cast<uint16_t>(name.size()));
    w.Bytes(name);
    w.U32(static_cast<uint32_t>(off));
  }
  const std::vector<uint8_t> t = tables_->Serialize();
  w.U32(static_cast<uint32_t>(t.size()));
  w.Bytes(t);
  w.U64(Xxh3_64(out));
  return out;
}

Result<SpecStateArtifact> SpecStateArtifact::Parse(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8 + 8 || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return Status::Corruption("spec state artifact: bad magic or too short");
  }
  const uint64_t stored = LoadLe<uint64_t>(bytes.data() + bytes.size() - 8);
  if (stored != Xxh3_64(bytes.first(bytes.size() - 8))) {
    return Status::Corruption("spec state artifact: checksum mismatch");
  }
  ByteReader r(bytes.first(bytes.size() - 8));
  r.Skip(4);
  uint16_t version = 0, reserved = 0;
  uint32_t def = 0, n = 0;
  if (!r.U16(&version) || !r.U16(&reserved)) return Status::Corruption("spec state artifact: short");
  if (version != kVersion) {
    return Status::Mismatch("spec state artifact: version " + std::to_string(version) +
                            ", this build reads " + std::to_string(kVersion));
  }
  if (reserved != 0 || !r.U32(&def) || !r.U32(&n)) {
    return Status::Corruption("spec state artifact: bad header");
  }
  std::map<std::string, int32_t> offsets;
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t len = 0;
    std::span<const uint8_t> name;
    uint32_t off = 0;
    if (!r.U16(&len) || len == 0 || len > 255 || !r.Take(len, &name) || !r.U32(&off)) {
      return Status::Corruption("spec state artifact: bad offset entry");
    }
    std::string s(name.begin(), name.end());
    if (!offsets.empty() && !(offsets.rbegin()->first < s)) {
      return Status::Corruption("spec state artifact: names not strictly increasing");
    }
    offsets.emplace(std::move(s), static_cast<int32_t>(off));
  }
  uint32_t table_bytes = 0;
  std::span<const uint8_t> tb;
  if (!r.U32(&table_bytes) || !r.Take(table_bytes, &tb) || r.remaining() != 0) {
    return Status::Corruption("spec state artifact: bad table section");
  }
  auto tables = entropy::TableSet::Parse(tb);
  if (!tables.ok()) return Status::Corruption("spec state artifact: " + tables.status().message());
  auto shared = std::make_shared<const entropy::TableSet>(std::move(*tables));
  auto a = Create(std::move(offsets), static_cast<int32_t>(def), std::move(shared));
  if (!a.ok()) return Status::Corruption(a.status().message());
  return a;
}

int32_t SpecStateArtifact::Offset4(const std::string& name) const {
  auto it = offsets4_.find(name);
  return it == offsets4_.end() ? default_offset4_ : it->second;
}

Result<SpecStateArtifact> CalibrateSpecState(std::span<const StateCalibrationPair> pairs,
                                             const StateCalibrationOptions& options) {
  if (pairs.empty()) return Status::InvalidArgument("spec state calibration: no pairs");
  for (const StateCalibrationPair& p : pairs) {
    if (p.exact == nullptr || p.predicted == nullptr) {
      return Status::InvalidArgument("spec state calibration: null state");
    }
    KVSTASH_RETURN_IF_ERROR(CheckSameStateShape(*p.exact, *p.predicted));
  }
  // Pass 1: per-name mean of log2(|r| + 1) minus the row-scale term, quarter octaves.
  std::map<std::string, std::pair<double, uint64_t>> acc;
  for (const StateCalibrationPair& p : pairs) {
    for (size_t t = 0; t < p.exact->tensors.size(); ++t) {
      const std::vector<uint32_t> x = TensorBits(p.exact->tensors[t]);
      const std::vector<uint32_t> q = TensorBits(p.predicted->tensors[t]);
      const std::vector<int32_t> scale4 = Scales(p.predicted->tensors[t], q);
      auto& [sum, count] = acc[p.exact->tensors[t].name];
      for (size_t i = 0; i < q.size(); ++i) {
        const uint32_t e_p = (q[i] >> 23) & 0xFFu;
        if (e_p == 0 || e_p == 0xFFu) continue;
        const uint32_t res = Ordinal32(x[i]) - Ordinal32(q[i]);
        const double mag = (res & 0x80000000u) ? 4294967296.0 - res : static_cast<double>(res);
        const double base4 = static_cast<double>(scale4[i]) - 4.0 * e_p + 92.0;
        sum += 4.0 * std::log2(mag + 1.0) - base4;
        ++count;
      }
    }
  }
  std::map<std::string, int32_t> offsets;
  double def_sum = 0.0;
  for (const auto& [name, sc] : acc) {
    const int32_t off = sc.second > 0 ? static_cast<int32_t>(std::lround(sc.first / sc.second)) : 0;
    offsets[name] = off;
    def_sum += off;
  }
  const int32_t def = acc.empty() ? 0 : static_cast<int32_t>(std::lround(def_sum / acc.size()));

  // Pass 2: token histograms per table.
  std::vector<std::vector<double>> counts(kStateTables, std::vector<double>(256, 1.0 / 64));
  for (const StateCalibrationPair& p : pairs) {
    for (size_t t = 0; t < p.exact->tensors.size(); ++t) {
      const std::vector<uint32_t> x = TensorBits(p.exact->tensors[t]);
      const std::vector<uint32_t> q = TensorBits(p.predicted->tensors[t]);
      const std::vector<int32_t> scale4 = Scales(p.predicted->tensors[t], q);
      const int32_t off = offsets[p.exact->tensors[t].name];
      for (size_t i = 0; i < q.size(); ++i) {
        const int table = StateTableOf(q[i], scale4[i], off);
        counts[table][TokenOfResidual(Ordinal32(x[i]) - Ordinal32(q[i])).symbol] += 1.0;
      }
    }
  }
  std::vector<entropy::FrequencyTable> tables;
  entropy::TableBuildOptions bo;
  bo.precision = options.precision;
  for (const std::vector<double>& c : counts) {
    KVSTASH_ASSIGN_OR_RETURN(entropy::FrequencyTable ft, entropy::BuildTable(c, bo));
    tables.push_back(std::move(ft));
  }
  KVSTASH_ASSIGN_OR_RETURN(entropy::TableSet set, entropy::TableSet::Create(std::move(tables)));
  return SpecStateArtifact::Create(std::move(offsets), def,
                                   std::make_shared<const entropy::TableSet>(std::move(set)));
}

}  // namespace kvstash::spec
