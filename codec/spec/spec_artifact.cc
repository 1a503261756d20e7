#include "codec/spec/spec_artifact.h"

#include <openssl/sha.h>

#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash::spec {
namespace {
constexpr uint32_t kArtifactMagic = 0x4153564B;  // "KVSA"
constexpr uint16_t kArtifactVersion = 1;
}  // namespace

std::span<const float> SpecArtifact::Log2Sigma(uint32_t layer, uint32_t kv) const {
  const size_t n = static_cast<size_t>(layout.n_kv_heads) * layout.head_dim;
  return std::span(log2_sigma).subspan((2 * static_cast<size_t>(layer) + kv) * n, n);
}

std::vector<uint8_t> SpecArtifact::Serialize() const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.U32(kArtifactMagic);
  w.U16(kArtifactVersion);
  w.U8(static_cast<uint8_t>(layout.dtype));
  w.U8(0);
  w.U32(layout.n_layers);
  w.U32(layout.n_kv_heads);
  w.U32(layout.head_dim);
  w.U32(Bits(contexts.s_min));
  w.U32(Bits(contexts.step));
  w.U32(contexts.buckets);
  w.U32(contexts.frac_bins);
  w.U64(predictor_digest);
  w.U32(static_cast<uint32_t>(predictor_variant.size()));
  w.Bytes(predictor_variant);
  for (float s : log2_sigma) w.U32(Bits(s));
  const std::vector<uint8_t> t = tables->Serialize();
  w.U32(static_cast<uint32_t>(t.size()));
  w.Bytes(t);
  w.U64(Xxh3_64(out));
  return out;
}

Result<SpecArtifact> SpecArtifact::Parse(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) return Status::Corruption("spec artifact too short");
  const size_t body = bytes.size() - 8;
  if (LoadLe<uint64_t>(bytes.data() + body) != Xxh3_64(bytes.first(body))) {
    return Status::Corruption("spec artifact checksum mismatch");
  }
  ByteReader r(bytes.first(body));
  uint32_t magic = 0, variant_len = 0, s_min = 0, step = 0, table_bytes = 0;
  uint16_t version = 0;
  uint8_t dtype = 0, reserved = 0;
  SpecArtifact a;
  if (!r.U32(&magic) || magic != kArtifactMagic) return Status::Corruption("not a spec artifact");
  if (!r.U16(&version)) return Status::Corruption("spec artifact truncated");
  if (version != kArtifactVersion) return Status::Mismatch("spec artifact version " + std::to_string(version));
  if (!r.U8(&dtype) || !r.U8(&reserved) || !r.U32(&a.layout.n_layers) ||
      !r.U32(&a.layout.n_kv_heads) || !r.U32(&a.layout.head_dim) || !r.U32(&s_min) ||
      !r.U32(&step) || !r.U32(&a.contexts.buckets) || !r.U32(&a.contexts.frac_bins) ||
      !r.U64(&a.predictor_digest) || !r.U32(&variant_len)) {
    return Status::Corruption("spec artifact header truncated");
  }
  if (reserved != 0) return Status::Corruption("spec artifact reserved byte is not 0");
  if (!IsValidDType(dtype)) return Status::Corruption("spec artifact dtype invalid");
  a.layout.dtype = a.contexts.dtype = static_cast<DType>(dtype);
  a.contexts.s_min = FromBits(s_min);
  a.contexts.step = FromBits(step);
  if (Status s = a.layout.Validate(); !s.ok()) return Status::Corruption("spec artifact: " + s.message());
  if (Status s = a.contexts.Validate(); !s.ok()) return Status::Corruption("spec artifact: " + s.message());
  std::span<const uint8_t> v;
  if (variant_len > 256 || !r.Take(variant_len, &v)) return Status::Corruption("spec artifact variant");
  a.predictor_variant.assign(v.begin(), v.end());
  const size_t n_sigma = 2ull * a.layout.n_layers * a.layout.n_kv_heads * a.layout.head_dim;
  if (r.remaining() < n_sigma * 4) return Status::Corruption("spec artifact sigma truncated");
  a.log2_sigma.resize(n_sigma);
  for (float& s : a.log2_sigma) {
    uint32_t b = 0;
    r.U32(&b);
    s = FromBits(b);
  }
  std::span<const uint8_t> t;
  if (!r.U32(&table_bytes) || !r.Take(table_bytes, &t) || r.remaining() != 0) {
    return Status::Corruption("spec artifact tables truncated");
  }
  KVSTASH_ASSIGN_OR_RETURN(entropy::TableSet ts, entropy::TableSet::Parse(t));
  a.tables = std::make_shared<const entropy::TableSet>(std::move(ts));
  if (a.tables->size() != a.contexts.num_tables() ||
      a.tables->symbol_bits() != a.contexts.symbol_bits()) {
    return Status::Corruption("spec artifact table count or width does not match its contexts");
  }
  return a;
}

Digest256 SpecArtifact::Digest() const {
  const std::vector<uint8_t> bytes = Serialize();
  Digest256 d{};
  SHA256(bytes.data(), bytes.size(), d.data());
  return d;
}

}  // namespace kvstash::spec
