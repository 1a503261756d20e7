#include "codec/dckv/dckv_artifact.h"

#include <openssl/sha.h>

#include <bit>
#include <cmath>
#include <string>

#include "codec/dckv/dckv_correction.h"
#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash::dckv {
namespace {

void PutF32(ByteWriter& w, float v) { w.U32(std::bit_cast<uint32_t>(v)); }

bool GetF32(ByteReader& r, float* v) {
  uint32_t u = 0;
  if (!r.U32(&u)) return false;
  *v = std::bit_cast<float>(u);
  return true;
}

void PutNet(ByteWriter& w, const DckvNet& net) {
  w.U32(net.hidden);
  for (const auto* v : {&net.w1, &net.b1, &net.w2, &net.b2}) {
    for (float x : *v) PutF32(w, x);
  }
}

// Reads one correction net of `inputs` -> `outputs` (shape and bounds are checked by
// CheckCorrectionNets afterwards). False when truncated or too large.
bool GetNet(ByteReader& r, uint32_t inputs, uint32_t outputs, DckvNet* net) {
  if (!r.U32(&net->hidden) || net->hidden > kMaxCorrectionHidden) return false;
  if (net->hidden == 0) return true;
  const uint64_t h = net->hidden;
  const uint64_t floats = h * inputs + h + static_cast<uint64_t>(outputs) * h + outputs;
  if (r.remaining() < 4 * floats) return false;
  net->w1.resize(h * inputs);
  net->b1.resize(h);
  net->w2.resize(outputs * h);
  net->b2.resize(outputs);
  for (auto* v : {&net->w1, &net->b1, &net->w2, &net->b2}) {
    for (float& x : *v) GetF32(r, &x);
  }
  return true;
}

// Upper bounds that keep every size computation far from overflow.
constexpr uint32_t kMaxDims = 1u << 20;
constexpr uint32_t kMaxGroups = 4096;
constexpr uint32_t kMaxVocab = 1u << 22;
constexpr uint32_t kMaxRank = 4096;

}  // namespace

uint64_t DckvArtifact::ActiveComponents() const {
  uint64_t n = 0;
  for (const auto& g : groups) n += g.n_active();
  return n;
}

bool DckvArtifact::HasCorrection() const {
  for (const auto& g : groups) {
    if (!g.decoder_net.empty() || !g.encoder_net.empty()) return true;
  }
  return false;
}

bool DckvArtifact::HasDecoderCorrection() const {
  for (const auto& g : groups) {
    if (!g.decoder_net.empty()) return true;
  }
  return false;
}

bool DckvArtifact::HasEncoderBasis() const {
  for (const auto& g : groups) {
    if (!g.encoder_basis.empty()) return true;
  }
  return false;
}

std::vector<uint8_t> DckvArtifact::Serialize() const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.U32(kArtifactMagic);
  const bool encoder_basis = HasEncoderBasis();
  const bool correction = encoder_basis || HasCorrection();  // versions 4 and 5 carry the nets
  w.U16(encoder_basis ? kArtifactVersionEncoderBasis
        : correction  ? kArtifactVersionCorrection
                      : kArtifactVersion);
  w.U16(0);
  w.U32(n_layers);
  w.U32(n_kv_heads);
  w.U32(head_dim);
  PutF32(w, rope_theta);
  w.U32(group_layers);
  w.U32(raw_head);
  w.U32(raw_tail);
  PutF32(w, target_ratio);
  w.U32(conditioning.vocab);
  w.U32(conditioning.rank);
  for (uint16_t v : conditioning.embed_bf16) w.U16(v);
  w.U32(static_cast<uint32_t>(groups.size()));
  for (const auto& g : groups) {
    w.U32(g.first_layer);
    w.U32(g.layers);
    w.U32(g.dims);
    w.U32(g.n_active());
    for (float v : g.mean) PutF32(w, v);
    w.U32(g.encode_scale.empty() ? 0u : 1u);
    for (float v : g.encode_scale) PutF32(w, v);
    for (float v : g.basis) PutF32(w, v);
    for (float v : g.step) PutF32(w, v);
    for (uint16_t t : g.table_index) w.U16(t);
    for (uint16_t t : g.odd_table_index) w.U16(t);
    for (float v : g.token_map) PutF32(w, v);
    w.U32(g.context_map.empty() ? 0u : g.context_inputs + conditioning.rank + 1);
    for (float v : g.context_map) PutF32(w, v);
    if (correction) {
      PutNet(w, g.decoder_net);
      PutNet(w, g.encoder_net);
    }
    if (encoder_basis) {
      w.U32(g.encoder_basis.empty() ? 0u : 1u);
      for (float v : g.encoder_basis) PutF32(w, v);
    }
  }
  const std::vector<uint8_t> t = tables ? tables->Serialize() : std::vector<uint8_t>{};
  w.U32(static_cast<uint32_t>(t.size()));
  w.Bytes(t);
  w.U64(Xxh3_64(out));
  return out;
}

Result<DckvArtifact> DckvArtifact::Parse(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) return Status::Corruption("dckv artifact: too short");
  const uint64_t stored = LoadLe<uint64_t>(bytes.data() + bytes.size() - 8);
  const auto body = bytes.first(bytes.size() - 8);
  if (Xxh3_64(body) != stored) return Status::Corruption("dckv artifact: checksum mismatch");
  ByteReader r(body);
  uint32_t magic = 0, n_groups = 0;
  uint16_t version = 0, reserved = 0;
  DckvArtifact a;
  if (!r.U32(&magic) || magic != kArtifactMagic) return Status::Corruption("dckv artifact: bad magic");
  if (!r.U16(&version) || !r.U16(&reserved)) return Status::Corruption("dckv artifact: truncated");
  if (version != kArtifactVersion && version != kArtifactVersionCorrection &&
      version != kArtifactVersionEncoderBasis) {
    return Status::Mismatch("dckv artifact: unknown version " + std::to_string(version));
  }
  if (reserved != 0) return Status::Corruption("dckv artifact: nonzero reserved field");
  if (!r.U32(&a.n_layers) || !r.U32(&a.n_kv_heads) || !r.U32(&a.head_dim) ||
      !GetF32(r, &a.rope_theta) || !r.U32(&a.group_layers) || !r.U32(&a.raw_head) ||
      !r.U32(&a.raw_tail) || !GetF32(r, &a.target_ratio) || !r.U32(&a.conditioning.vocab) ||
      !r.U32(&a.conditioning.rank)) {
    return Status::Corruption("dckv artifact: truncated header");
  }
  DckvConditioning& cond = a.conditioning;
  if (cond.vocab > kMaxVocab || cond.rank > kMaxRank || (cond.rank > 0) != (cond.vocab > 0) ||
      r.remaining() < 2ull * cond.vocab * cond.rank) {
    return Status::Corruption("dckv artifact: bad conditioning embeddings");
  }
  cond.embed_bf16.resize(static_cast<size_t>(cond.vocab) * cond.rank);
  for (uint16_t& v : cond.embed_bf16) {
    r.U16(&v);
    if ((v & 0x7F80) == 0x7F80) return Status::Corruption("dckv artifact: non-finite embedding");
  }
  if (!r.U32(&n_groups)) return Status::Corruption("dckv artifact: truncated header");
  if (a.n_layers == 0 || a.n_layers > 1024 || a.n_kv_heads == 0 || a.n_kv_heads > 1024 ||
      a.head_dim == 0 || a.head_dim > 4096 || a.head_dim % 2 != 0 ||
      !(std::isfinite(a.rope_theta) && a.rope_theta > 0) || a.group_layers == 0 ||
      n_groups == 0 || n_groups > kMaxGroups) {
    return Status::Corruption("dckv artifact: bad shape");
  }
  uint32_t next_layer = 0;
  std::vector<uint16_t> all_tables;
  for (uint32_t gi = 0; gi < n_groups; ++gi) {
    DckvGroup g;
    uint32_t n_active = 0;
    if (!r.U32(&g.first_layer) || !r.U32(&g.layers) || !r.U32(&g.dims) || !r.U32(&n_active)) {
      return Status::Corruption("dckv artifact: truncated group");
    }
    if (g.first_layer != next_layer || g.layers == 0 || g.layers > a.n_layers - next_layer ||
        static_cast<uint64_t>(g.dims) != 2ull * g.layers * a.HeadRow() || g.dims > kMaxDims ||
        n_active > g.dims) {
      return Status::Corruption("dckv artifact: inconsistent group");
    }
    next_layer += g.layers;
    if (r.remaining() < 4ull * g.dims) return Status::Corruption("dckv artifact: truncated group data");
    g.mean.resize(g.dims);
    for (float& v : g.mean) GetF32(r, &v);
    uint32_t has_scale = 0;
    if (!r.U32(&has_scale) || has_scale > 1) return Status::Corruption("dckv artifact: bad encode-scale flag");
    if (has_scale == 1) {
      if (r.remaining() < 4ull * g.dims) return Status::Corruption("dckv artifact: truncated encode scale");
      g.encode_scale.resize(g.dims);
      for (float& v : g.encode_scale) {
        GetF32(r, &v);
        if (!(std::isfinite(v) && v > 0)) return Status::Corruption("dckv artifact: bad encode scale");
      }
    }
    const uint64_t floats = static_cast<uint64_t>(n_active) * g.dims + n_active;
    if (r.remaining() < floats * 4 + 2ull * n_active) return Status::Corruption("dckv artifact: truncated group data");
    g.basis.resize(static_cast<size_t>(n_active) * g.dims);
    g.step.resize(n_active);
    g.table_index.resize(n_active);
    for (float& v : g.basis) GetF32(r, &v);
    for (float& v : g.step) {
      GetF32(r, &v);
      if (!(std::isfinite(v) && v > 0)) return Status::Corruption("dckv artifact: bad step");
    }
    for (uint16_t& t : g.table_index) r.U16(&t);
    const uint64_t token_map_size = static_cast<uint64_t>(cond.rank + 1) * n_active;
    if (r.remaining() < 2ull * n_active + 4ull * token_map_size + 4) {
      return Status::Corruption("dckv artifact: truncated group data");
    }
    g.odd_table_index.resize(n_active);
    g.token_map.resize(token_map_size);
    for (uint16_t& t : g.odd_table_index) r.U16(&t);
    for (float& v : g.token_map) GetF32(r, &v);
    uint32_t context_rows = 0;
    r.U32(&context_rows);
    if (context_rows != 0 && (context_rows <= cond.rank + 1 || context_rows - cond.rank - 1 > n_active)) {
      return Status::Corruption("dckv artifact: bad context map shape");
    }
    g.context_inputs = context_rows == 0 ? 0 : context_rows - cond.rank - 1;
    if (r.remaining() < 4ull * context_rows * n_active) return Status::Corruption("dckv artifact: truncated context map");
    g.context_map.resize(static_cast<size_t>(context_rows) * n_active);
    for (float& v : g.context_map) GetF32(r, &v);
    for (float v : g.token_map) if (!std::isfinite(v)) return Status::Corruption("dckv artifact: non-finite token map");
    for (float v : g.context_map) if (!std::isfinite(v)) return Status::Corruption("dckv artifact: non-finite context map");
    for (float v : g.mean) if (!std::isfinite(v)) return Status::Corruption("dckv artifact: non-finite mean");
    for (float v : g.basis) if (!std::isfinite(v)) return Status::Corruption("dckv artifact: non-finite basis");
    if (version >= kArtifactVersionCorrection) {
      if (!GetNet(r, n_active, g.dims, &g.decoder_net) || !GetNet(r, g.dims, n_active, &g.encoder_net)) {
        return Status::Corruption("dckv artifact: truncated or oversized correction net");
      }
      if (Status st = CheckCorrectionNets(g); !st.ok()) return Status::Corruption("dckv artifact: " + st.message());
    }
    if (version == kArtifactVersionEncoderBasis) {
      uint32_t has_encoder = 0;
      if (!r.U32(&has_encoder) || has_encoder > 1)
        return Status::Corruption("dckv artifact: bad encoder-basis flag");
      if (has_encoder == 1) {
        if (!g.encode_scale.empty())
          return Status::Corruption("dckv artifact: encoder basis beside an encode scale");
        if (r.remaining() < 4ull * n_active * g.dims)
          return Status::Corruption("dckv artifact: truncated encoder basis");
        g.encoder_basis.resize(static_cast<size_t>(n_active) * g.dims);
        for (float& v : g.encoder_basis) {
          GetF32(r, &v);
          if (!std::isfinite(v)) return Status::Corruption("dckv artifact: non-finite encoder basis");
        }
      }
    }
    all_tables.insert(all_tables.end(), g.table_index.begin(), g.table_index.end());
    all_tables.insert(all_tables.end(), g.odd_table_index.begin(), g.odd_table_index.end());
    a.groups.push_back(std::move(g));
  }
  if (next_layer != a.n_layers) return Status::Corruption("dckv artifact: groups do not cover the layers");
  if (version == kArtifactVersionCorrection && !a.HasCorrection()) {
    return Status::Corruption("dckv artifact: version 4 without a correction net (written as version 3)");
  }
  if (version == kArtifactVersionEncoderBasis && !a.HasEncoderBasis()) {
    return Status::Corruption(
        "dckv artifact: version 5 without an encoder basis (written as version 3 or 4)");
  }
  uint32_t table_bytes = 0;
  std::span<const uint8_t> tb;
  if (!r.U32(&table_bytes) || !r.Take(table_bytes, &tb) || r.remaining() != 0) {
    return Status::Corruption("dckv artifact: bad table section");
  }
  auto tables = entropy::TableSet::Parse(tb);
  if (!tables.ok()) return Status::Corruption("dckv artifact: " + tables.status().ToString());
  if (tables->symbol_bits() != 16) return Status::Corruption("dckv artifact: tables are not 16-bit");
  for (uint16_t t : all_tables) {
    if (t >= tables->size()) return Status::Corruption("dckv artifact: table index out of range");
  }
  a.tables = std::make_shared<const entropy::TableSet>(std::move(*tables));
  return a;
}

Digest256 DckvArtifact::Digest() const {
  const std::vector<uint8_t> bytes = Serialize();
  Digest256 d{};
  SHA256(bytes.data(), bytes.size(), d.data());
  return d;
}

}  // namespace kvstash::dckv
