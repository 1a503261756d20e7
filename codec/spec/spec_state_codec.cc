#include "codec/spec/spec_state_codec.h"

#include <cmath>
#include <cstring>

#include "codec/entropy/rans.h"
#include "codec/spec/spec_state_symbols.h"
#include "common/byte_io.h"

namespace kvstash::spec {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'S', 'S', 'C'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 8 + 8 + 8 + 4;

// The prediction's bits and the table of every scalar, in coding order.
struct PredictionView {
  std::vector<uint32_t> bits;
  std::vector<uint16_t> tables;
};

Result<PredictionView> ViewPrediction(const SpecStateArtifact& artifact,
                                      const RecurrentState& predicted) {
  PredictionView v;
  uint64_t total = 0;
  for (const StateTensor& t : predicted.tensors) {
    KVSTASH_RETURN_IF_ERROR(t.Validate());
    if (t.dtype != DType::kF32) {
      return Status::InvalidArgument("spec state: tensor '" + t.name + "' is not f32");
    }
    total += t.data.size() / 4;
  }
  if (total > UINT32_MAX) return Status::InvalidArgument("spec state: more than 2^32-1 scalars");
  v.bits.resize(total);
  v.tables.resize(total);
  size_t pos = 0;
  for (const StateTensor& t : predicted.tensors) {
    const size_t n = t.data.size() / 4;
    uint32_t* bits = v.bits.data() + pos;
    for (size_t i = 0; i < n; ++i) bits[i] = LoadLe<uint32_t>(t.data.data() + 4 * i);
    const int32_t off = artifact.Offset4(t.name);
    std::vector<int32_t> scale4(n);
    ScaleQuarterOctaves(bits, n, t.shape.data(), t.shape.size(), scale4.data());
    for (size_t i = 0; i < n; ++i) {
      v.tables[pos + i] = static_cast<uint16_t>(StateTableOf(bits[i], scale4[i], off));
    }
    pos += n;
  }
  return v;
}

std::string KindOf(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

}  // namespace

Result<std::vector<uint8_t>> EncodeSpecState(const SpecStateArtifact& artifact,
                                             const RecurrentState& exact,
                                             const RecurrentState& predicted,
                                             StateCodingStats* stats) {
  KVSTASH_RETURN_IF_ERROR(CheckSameStateShape(exact, predicted));
  if (exact.boundary_tokens != predicted.boundary_tokens) {
    return Status::InvalidArgument("spec state: exact and predicted states are at other boundaries");
  }
  KVSTASH_ASSIGN_OR_RETURN(PredictionView pv, ViewPrediction(artifact, predicted));
  const size_t n = pv.bits.size();
  std::vector<uint8_t> symbols(n);
  std::vector<uint8_t> raw;
  raw.reserve(n * 2);
  uint64_t raw_bits = 0, acc = 0;
  int acc_bits = 0;
  StateCodingStats st;
  size_t pos = 0;
  for (const StateTensor& t : exact.tensors) {
    const size_t m = t.data.size() / 4;
    auto& [kind_bits, kind_scalars] = st.ideal_bits_by_kind[KindOf(t.name)];
    kind_scalars += m;
    for (size_t i = 0; i < m; ++i, ++pos) {
      const uint32_t x = LoadLe<uint32_t>(t.data.data() + 4 * i);
      const StateToken tok = TokenOfResidual(Ordinal32(x) - Ordinal32(pv.bits[pos]));
      symbols[pos] = tok.symbol;
      if (stats != nullptr) {
        kind_bits += tok.raw_count -
                     std::log2(artifact.tables().table(pv.tables[pos]).Probability(tok.symbol));
      }
      acc |= static_cast<uint64_t>(tok.raw) << acc_bits;
      acc_bits += tok.raw_count;
      raw_bits += tok.raw_count;
      while (acc_bits >= 8) {
        raw.push_back(static_cast<uint8_t>(acc));
        acc >>= 8;
        acc_bits -= 8;
      }
    }
  }
  if (acc_bits > 0) raw.push_back(static_cast<uint8_t>(acc));
  std::vector<uint8_t> rans;
  if (Status s = entropy::RansEncodeAppend(std::span<const uint8_t>(symbols), pv.tables,
                                           artifact.tables(), &rans);
      !s.ok()) {
    return Status::Internal("spec state: rANS encode: " + s.message());
  }
  if (rans.size() > UINT32_MAX) return Status::InvalidArgument("spec state: stream over 4 GiB");

  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + rans.size() + raw.size());
  ByteWriter w(&out);
  w.Bytes(std::span<const uint8_t>(kMagic, 4));
  w.U8(kVersion);
  w.U8(0);
  w.U16(0);
  w.U64(artifact.digest());
  w.U64(predicted.ContentChecksum());
  w.U64(exact.ContentChecksum());
  w.U64(n);
  w.U64(raw_bits);
  w.U32(static_cast<uint32_t>(rans.size()));
  w.Bytes(rans);
  w.Bytes(raw);
  if (stats != nullptr) {
    st.scalars = n;
    st.body_bytes = out.size();
    st.header_bytes = kHeaderBytes;
    st.rans_bytes = rans.size();
    st.raw_bits = raw_bits;
    *stats = std::move(st);
  }
  return out;
}

Result<RecurrentState> DecodeSpecState(const SpecStateArtifact& artifact,
                                       std::span<const uint8_t> body,
                                       const RecurrentState& predicted) {
  if (body.size() < kHeaderBytes || std::memcmp(body.data(), kMagic, 4) != 0) {
    return Status::Corruption("spec state: bad magic or short body");
  }
  ByteReader r(body);
  r.Skip(4);
  uint8_t version = 0, flags = 0;
  uint16_t reserved = 0;
  uint64_t artifact_digest = 0, pred_sum = 0, exact_sum = 0, scalars = 0, raw_bits = 0;
  uint32_t rans_bytes = 0;
  r.U8(&version);
  r.U8(&flags);
  r.U16(&reserved);
  if (version != kVersion) {
    return Status::Mismatch("spec state: body version " + std::to_string(version) +
                            ", this build reads " + std::to_string(kVersion));
  }
  if (flags != 0 || reserved != 0) return Status::Corruption("spec state: bad flags");
  r.U64(&artifact_digest);
  r.U64(&pred_sum);
  r.U64(&exact_sum);
  r.U64(&scalars);
  r.U64(&raw_bits);
  r.U32(&rans_bytes);
  if (artifact_digest != artifact.digest()) {
    return Status::Mismatch("spec state: coded with another artifact");
  }
  KVSTASH_ASSIGN_OR_RETURN(PredictionView pv, ViewPrediction(artifact, predicted));
  if (pred_sum != predicted.ContentChecksum()) {
    return Status::Mismatch("spec state: the decoder's prediction differs from the encoder's");
  }
  const size_t n = pv.bits.size();
  std::span<const uint8_t> rans, raw;
  if (scalars != n || raw_bits > 29ull * n || !r.Take(rans_bytes, &rans) ||
      !r.Take((raw_bits + 7) / 8, &raw) || r.remaining() != 0) {
    return Status::Corruption("spec state: sizes disagree with the body or the prediction");
  }
  std::vector<uint8_t> symbols(n);
  if (Status s = entropy::RansDecode(rans, pv.tables, artifact.tables(), std::span<uint8_t>(symbols));
      !s.ok()) {
    return Status::Corruption("spec state: " + s.message());
  }
  uint64_t need = 0;
  for (uint8_t s : symbols) {
    const int c = RawCountOfSymbol(s);
    if (c < 0) return Status::Corruption("spec state: invalid token");
    need += static_cast<uint64_t>(c);
  }
  if (need != raw_bits || (raw_bits % 8 != 0 && (raw.back() >> (raw_bits % 8)) != 0)) {
    return Status::Corruption("spec state: raw-bit section disagrees with the tokens");
  }
  RecurrentState out;
  out.boundary_tokens = predicted.boundary_tokens;
  out.tensors.reserve(predicted.tensors.size());
  size_t pos = 0, byte = 0;
  uint64_t acc = 0;
  int acc_bits = 0;
  for (const StateTensor& t : predicted.tensors) {
    StateTensor o;
    o.name = t.name;
    o.dtype = t.dtype;
    o.shape = t.shape;
    o.data.resize(t.data.size());
    const size_t m = t.data.size() / 4;
    for (size_t i = 0; i < m; ++i, ++pos) {
      const int c = RawCountOfSymbol(symbols[pos]);
      while (acc_bits < c) {
        acc |= static_cast<uint64_t>(raw[byte++]) << acc_bits;
        acc_bits += 8;
      }
      const uint32_t bits = static_cast<uint32_t>(acc & ((uint64_t{1} << c) - 1));
      acc >>= c;
      acc_bits -= c;
      const uint32_t res = ResidualOfToken(symbols[pos], bits);
      StoreLe<uint32_t>(o.data.data() + 4 * i, FromOrdinal32(Ordinal32(pv.bits[pos]) + res));
    }
    out.tensors.push_back(std::move(o));
  }
  if (out.ContentChecksum() != exact_sum) {
    return Status::Corruption("spec state: decoded state fails its checksum");
  }
  return out;
}

}  // namespace kvstash::spec
