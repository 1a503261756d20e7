#include "codec/spec/spec_codec.h"

#include <string>

#include "codec/entropy/rans_segments.h"
#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash::spec {
namespace {

Status CheckShapes(const SpecArtifact& a, const KvLayout& layout, uint32_t tokens,
                   const PredictedChunk& p) {
  if (!(layout == a.layout)) {
    return Status::InvalidArgument("spec: chunk layout differs from the artifact's");
  }
  if (p.tokens != tokens || p.k.size() != layout.n_layers || p.v.size() != layout.n_layers) {
    return Status::InvalidArgument("spec: prediction shape differs from the chunk's");
  }
  for (uint32_t l = 0; l < layout.n_layers; ++l) {
    if (p.k[l] == nullptr || p.v[l] == nullptr) {
      return Status::InvalidArgument("spec: prediction has a null layer");
    }
  }
  return Status::Ok();
}

// Reads stored bits of scalar i of a K/V tensor as u16 (bf16 pattern or fp8 byte).
uint16_t LoadBits(std::span<const uint8_t> t, size_t i, bool fp8) {
  return fp8 ? t[i] : LoadLe<uint16_t>(t.data() + 2 * i);
}

}  // namespace

uint64_t PredictedChunk::Digest(const KvLayout& layout) const {
  Xxh3Hasher h;
  const size_t n = layout.ScalarsPerTensor(tokens) * sizeof(float);
  for (const auto* side : {&k, &v}) {
    for (const float* p : *side) h.Update(std::span(reinterpret_cast<const uint8_t*>(p), n));
  }
  return h.Digest();
}

Result<std::vector<uint8_t>> EncodeSpecPayload(const SpecArtifact& artifact,
                                               const KvChunkView& chunk,
                                               const PredictedChunk& prediction,
                                               const Digest256& model_fingerprint,
                                               uint32_t token_offset) {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  KVSTASH_RETURN_IF_ERROR(CheckShapes(artifact, chunk.layout, chunk.tokens, prediction));
  const KvLayout& L = chunk.layout;
  const bool fp8 = L.dtype == DType::kFP8E4M3;
  const size_t n = L.ScalarsPerTensor(chunk.tokens);
  const uint32_t n_streams = 2 * L.n_layers;

  std::vector<uint8_t> body;
  ByteWriter w(&body);
  w.U64(prediction.Digest(L));
  w.U32(n_streams);
  if (fp8) {
    for (float s : chunk.scales) w.U32(Bits(s));
  }
  const size_t sizes_at = body.size();
  body.resize(body.size() + 4ull * n_streams);

  std::vector<uint16_t> pred_ord(n), table(n), symbols(n);
  std::vector<uint8_t> symbols8(fp8 ? n : 0);
  for (uint32_t l = 0; l < L.n_layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      const float* mu = kv == 0 ? prediction.k[l] : prediction.v[l];
      const float scale = fp8 ? chunk.scales[2 * l + kv] : 1.0f;
      KVSTASH_RETURN_IF_ERROR(ComputeContexts(artifact.contexts, std::span(mu, n),
                                              artifact.Log2Sigma(l, kv), scale, pred_ord, table));
      const std::span<const uint8_t> t = kv == 0 ? chunk.K(l) : chunk.V(l);
      for (size_t i = 0; i < n; ++i) {
        symbols[i] = ResidualSymbol(L.dtype, LoadBits(t, i, fp8), pred_ord[i]);
      }
      const size_t before = body.size();
      if (fp8) {
        for (size_t i = 0; i < n; ++i) symbols8[i] = static_cast<uint8_t>(symbols[i]);
        KVSTASH_RETURN_IF_ERROR(entropy::RansEncodeSegmentedAppend(
            symbols8, table, *artifact.tables, entropy::kDefaultSegmentSymbols, &body));
      } else {
        KVSTASH_RETURN_IF_ERROR(entropy::RansEncodeSegmentedAppend(
            symbols, table, *artifact.tables, entropy::kDefaultSegmentSymbols, &body));
      }
      StoreLe<uint32_t>(body.data() + sizes_at + 4 * (2 * l + kv),
                        static_cast<uint32_t>(body.size() - before));
    }
  }
  PayloadHeader h;
  h.codec = CodecId::kSpec;
  h.layout = L;
  h.tokens = chunk.tokens;
  h.token_offset = token_offset;
  h.artifact_digest = artifact.Digest();
  h.model_fingerprint = model_fingerprint;
  h.content_checksum = chunk.ContentChecksum();
  return BuildPayload(h, body);
}

Result<KvChunk> DecodeSpecPayload(const SpecArtifact& artifact, std::span<const uint8_t> payload,
                                  const PredictedChunk& prediction,
                                  const Digest256& model_fingerprint) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadView pv, ParsePayload(payload));
  const PayloadHeader& h = pv.header;
  if (h.codec != CodecId::kSpec) return Status::Mismatch("payload is not a spec payload");
  if (h.model_fingerprint != model_fingerprint) {
    return Status::Mismatch("spec payload was encoded for another model");
  }
  if (h.artifact_digest != artifact.Digest()) {
    return Status::Mismatch("spec payload was encoded with another artifact");
  }
  KVSTASH_RETURN_IF_ERROR(CheckShapes(artifact, h.layout, h.tokens, prediction));
  const KvLayout& L = h.layout;
  const bool fp8 = L.dtype == DType::kFP8E4M3;
  const size_t n = L.ScalarsPerTensor(h.tokens);
  const uint32_t n_streams = 2 * L.n_layers;

  ByteReader r(pv.body);
  uint64_t digest = 0;
  uint32_t streams = 0;
  if (!r.U64(&digest) || !r.U32(&streams) || streams != n_streams) {
    return Status::Corruption("spec body header malformed");
  }
  if (digest != prediction.Digest(L)) {
    return Status::Mismatch("spec: the decoder's predictor output differs from the encoder's");
  }
  KvChunk out = KvChunk::Zeros(L, h.tokens);
  for (float& s : out.scales) {
    uint32_t b = 0;
    if (!r.U32(&b)) return Status::Corruption("spec body truncated in scales");
    s = FromBits(b);
  }
  std::vector<uint32_t> sizes(n_streams);
  for (uint32_t& s : sizes) {
    if (!r.U32(&s)) return Status::Corruption("spec body truncated in stream sizes");
  }
  std::vector<uint16_t> pred_ord(n), table(n), symbols(n);
  std::vector<uint8_t> symbols8(fp8 ? n : 0);
  for (uint32_t l = 0; l < L.n_layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      std::span<const uint8_t> stream;
      if (!r.Take(sizes[2 * l + kv], &stream)) return Status::Corruption("spec stream truncated");
      const float* mu = kv == 0 ? prediction.k[l] : prediction.v[l];
      const float scale = fp8 ? out.scales[2 * l + kv] : 1.0f;
      if (Status s = ComputeContexts(artifact.contexts, std::span(mu, n), artifact.Log2Sigma(l, kv),
                                     scale, pred_ord, table);
          !s.ok()) {
        return Status::Corruption("spec body: " + s.message());
      }
      if (fp8) {
        KVSTASH_RETURN_IF_ERROR(entropy::RansDecodeSegmented(stream, table, *artifact.tables, symbols8));
        for (size_t i = 0; i < n; ++i) symbols[i] = symbols8[i];
      } else {
        KVSTASH_RETURN_IF_ERROR(entropy::RansDecodeSegmented(stream, table, *artifact.tables, symbols));
      }
      std::span<uint8_t> t = kv == 0 ? out.MutableK(l) : out.MutableV(l);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t bits = ValueFromResidual(L.dtype, symbols[i], pred_ord[i]);
        if (fp8) {
          t[i] = static_cast<uint8_t>(bits);
        } else {
          StoreLe<uint16_t>(t.data() + 2 * i, bits);
        }
      }
    }
  }
  if (r.remaining() != 0) return Status::Corruption("spec body has trailing bytes");
  if (out.ContentChecksum() != h.content_checksum) {
    return Status::Corruption("spec: decoded chunk fails its content checksum");
  }
  return out;
}

}  // namespace kvstash::spec
