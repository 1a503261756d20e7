#include "codec/spec/spec_codec.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codec/entropy/rans_segments.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "numerics/parallel_for.h"

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

// Reads stored bits of scalar i of a K/V tensor as u16 (bf16/f16 pattern or fp8 byte).
uint16_t LoadBits(std::span<const uint8_t> t, size_t i, bool fp8) {
  return fp8 ? t[i] : LoadLe<uint16_t>(t.data() + 2 * i);
}

// Runs body(worker, s) for every stream s in [0, n), stream s on worker s % workers,
// and returns the error of the lowest failing stream (Ok when none fails).
template <typename Body>
Status ForEachStream(uint32_t n, int threads, Body body) {
  std::vector<Status> status(n);
  numerics::ParallelFor(n, threads, [&](uint32_t w, uint32_t s) { status[s] = body(w, s); });
  for (Status& st : status) {
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// Writes the 16-bit values (little-endian) of symbols against prediction ordinals into
// out (2 bytes per scalar). Blocks of a fixed length, which compilers vectorise at -O2.
void RebuildBits16(std::span<const uint16_t> symbols, std::span<const uint16_t> pred_ord, std::span<uint8_t> out) {
  constexpr size_t kBlock = 64;
  const size_t n = symbols.size();
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint8_t bytes[2 * kBlock];
    for (size_t k = 0; k < kBlock; ++k) {
      const uint16_t bits = ValueFromResidualBits(false, symbols[i + k], pred_ord[i + k]);
      bytes[2 * k] = static_cast<uint8_t>(bits);
      bytes[2 * k + 1] = static_cast<uint8_t>(bits >> 8);
    }
    std::memcpy(out.data() + 2 * i, bytes, sizeof bytes);
  }
  for (; i < n; ++i) StoreLe<uint16_t>(out.data() + 2 * i, ValueFromResidualBits(false, symbols[i], pred_ord[i]));
}

// Per-worker scratch of one stream: prediction ordinals, table ids, symbols.
struct StreamScratch {
  std::vector<uint16_t> pred_ord, table, symbols;
  std::vector<uint8_t> symbols8;
  StreamScratch(size_t n, bool fp8) : pred_ord(n), table(n), symbols(n), symbols8(fp8 ? n : 0) {}
};

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
                                               uint32_t token_offset, int threads) {
  return EncodeSpecPayload(artifact, artifact.Digest(), chunk, prediction, model_fingerprint, token_offset, threads);
}

Result<std::vector<uint8_t>> EncodeSpecPayload(const SpecArtifact& artifact, const Digest256& artifact_digest,
                                               const KvChunkView& chunk, const PredictedChunk& prediction,
                                               const Digest256& model_fingerprint, uint32_t token_offset,
                                               int threads) {
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

  const uint32_t workers = static_cast<uint32_t>(std::clamp(threads, 1, static_cast<int>(n_streams)));
  std::vector<StreamScratch> scratch(workers, StreamScratch(n, fp8));
  std::vector<std::vector<uint8_t>> streams(n_streams);
  KVSTASH_RETURN_IF_ERROR(ForEachStream(n_streams, static_cast<int>(workers), [&](uint32_t w, uint32_t s) {
    const uint32_t l = s / 2, kv = s % 2;
    StreamScratch& x = scratch[w];
    const float* mu = kv == 0 ? prediction.k[l] : prediction.v[l];
    const float scale = fp8 ? chunk.scales[s] : 1.0f;
    KVSTASH_RETURN_IF_ERROR(ComputeContexts(artifact.contexts, std::span(mu, n), artifact.Log2Sigma(l, kv), scale,
                                            x.pred_ord, x.table));
    const std::span<const uint8_t> t = kv == 0 ? chunk.K(l) : chunk.V(l);
    for (size_t i = 0; i < n; ++i) x.symbols[i] = ResidualSymbol(L.dtype, LoadBits(t, i, fp8), x.pred_ord[i]);
    if (fp8) {
      for (size_t i = 0; i < n; ++i) x.symbols8[i] = static_cast<uint8_t>(x.symbols[i]);
      return entropy::RansEncodeSegmentedAppend(x.symbols8, x.table, *artifact.tables,
                                                entropy::kDefaultSegmentSymbols, &streams[s]);
    }
    return entropy::RansEncodeSegmentedAppend(x.symbols, x.table, *artifact.tables, entropy::kDefaultSegmentSymbols,
                                              &streams[s]);
  }));
  for (uint32_t s = 0; s < n_streams; ++s) {
    StoreLe<uint32_t>(body.data() + sizes_at + 4 * s, static_cast<uint32_t>(streams[s].size()));
    body.insert(body.end(), streams[s].begin(), streams[s].end());
  }
  PayloadHeader h =
      ChunkPayloadHeader(CodecId::kSpec, chunk, token_offset, /*partial=*/false, model_fingerprint);
  h.artifact_digest = artifact_digest;
  return BuildPayload(h, body);
}

Result<SpecPayloadParts> SplitSpecPayload(const SpecArtifact& artifact, std::span<const uint8_t> payload,
                                          const PredictedChunk& prediction,
                                          const Digest256& model_fingerprint) {
  return SplitSpecPayload(artifact, artifact.Digest(), payload, prediction, model_fingerprint);
}

Result<SpecPayloadParts> SplitSpecPayload(const SpecArtifact& artifact, const Digest256& artifact_digest,
                                          std::span<const uint8_t> payload, const PredictedChunk& prediction,
                                          const Digest256& model_fingerprint) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadView pv, ParsePayload(payload));
  const PayloadHeader& h = pv.header;
  if (h.codec != CodecId::kSpec) return Status::Mismatch("payload is not a spec payload");
  if (h.model_fingerprint != model_fingerprint) {
    return Status::Mismatch("spec payload was encoded for another model");
  }
  if (h.artifact_digest != artifact_digest) {
    return Status::Mismatch("spec payload was encoded with another artifact");
  }
  KVSTASH_RETURN_IF_ERROR(CheckShapes(artifact, h.layout, h.tokens, prediction));
  const uint32_t n_streams = 2 * h.layout.n_layers;
  ByteReader r(pv.body);
  uint64_t digest = 0;
  uint32_t streams = 0;
  if (!r.U64(&digest) || !r.U32(&streams) || streams != n_streams) {
    return Status::Corruption("spec body header malformed");
  }
  if (digest != prediction.Digest(h.layout)) {
    return Status::Mismatch("spec: the decoder's predictor output differs from the encoder's");
  }
  SpecPayloadParts parts;
  parts.header = h;
  parts.scales.resize(h.layout.NumScales());
  for (float& s : parts.scales) {
    uint32_t b = 0;
    if (!r.U32(&b)) return Status::Corruption("spec body truncated in scales");
    s = FromBits(b);
  }
  std::vector<uint32_t> sizes(n_streams);
  for (uint32_t& s : sizes) {
    if (!r.U32(&s)) return Status::Corruption("spec body truncated in stream sizes");
  }
  parts.streams.resize(n_streams);
  for (uint32_t s = 0; s < n_streams; ++s) {
    if (!r.Take(sizes[s], &parts.streams[s])) return Status::Corruption("spec stream truncated");
  }
  if (r.remaining() != 0) return Status::Corruption("spec body has trailing bytes");
  return parts;
}

Result<KvChunk> DecodeSpecPayload(const SpecArtifact& artifact, std::span<const uint8_t> payload,
                                  const PredictedChunk& prediction,
                                  const Digest256& model_fingerprint, int threads) {
  return DecodeSpecPayload(artifact, artifact.Digest(), payload, prediction, model_fingerprint, threads);
}

Result<KvChunk> DecodeSpecPayload(const SpecArtifact& artifact, const Digest256& artifact_digest,
                                  std::span<const uint8_t> payload, const PredictedChunk& prediction,
                                  const Digest256& model_fingerprint, int threads) {
  KVSTASH_ASSIGN_OR_RETURN(SpecPayloadParts parts,
                           SplitSpecPayload(artifact, artifact_digest, payload, prediction, model_fingerprint));
  const PayloadHeader& h = parts.header;
  const KvLayout& L = h.layout;
  const bool fp8 = L.dtype == DType::kFP8E4M3;
  const size_t n = L.ScalarsPerTensor(h.tokens);
  const uint32_t n_streams = 2 * L.n_layers;
  KvChunk out = KvChunk::Zeros(L, h.tokens);
  out.scales = parts.scales;
  const uint32_t workers = static_cast<uint32_t>(std::clamp(threads, 1, static_cast<int>(n_streams)));
  std::vector<StreamScratch> scratch(workers, StreamScratch(n, fp8));
  KVSTASH_RETURN_IF_ERROR(ForEachStream(n_streams, static_cast<int>(workers), [&](uint32_t w, uint32_t s) -> Status {
    const uint32_t l = s / 2, kv = s % 2;
    StreamScratch& x = scratch[w];
    const float* mu = kv == 0 ? prediction.k[l] : prediction.v[l];
    const float scale = fp8 ? out.scales[s] : 1.0f;
    if (Status st = ComputeContexts(artifact.contexts, std::span(mu, n), artifact.Log2Sigma(l, kv), scale, x.pred_ord,
                                    x.table);
        !st.ok()) {
      return Status::Corruption("spec body: " + st.message());
    }
    std::span<uint8_t> t = kv == 0 ? out.MutableK(l) : out.MutableV(l);
    if (fp8) {
      KVSTASH_RETURN_IF_ERROR(entropy::RansDecodeSegmented(parts.streams[s], x.table, *artifact.tables, x.symbols8));
      for (size_t i = 0; i < n; ++i) {
        t[i] = static_cast<uint8_t>(ValueFromResidualBits(true, x.symbols8[i], x.pred_ord[i]));
      }
      return Status::Ok();
    }
    KVSTASH_RETURN_IF_ERROR(entropy::RansDecodeSegmented(parts.streams[s], x.table, *artifact.tables, x.symbols));
    RebuildBits16(x.symbols, x.pred_ord, t);
    return Status::Ok();
  }));
  if (out.ContentChecksum() != h.content_checksum) {
    return Status::Corruption("spec: decoded chunk fails its content checksum");
  }
  return out;
}

}  // namespace kvstash::spec
