#include "kvstash/payload_format.h"

#include <string>

#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash {
namespace {

// Offsets of the chunk payload header (docs/format/payload.md).
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffHeaderBytes = 6, kOffCodec = 8,
                 kOffFlags = 10, kOffDtype = 12, kOffReserved1 = 13, kOffLayers = 16,
                 kOffHeads = 20, kOffHeadDim = 24, kOffTokens = 28, kOffTokenOffset = 32,
                 kOffReserved2 = 36, kOffArtifact = 40, kOffModel = 72,
                 kOffContentChecksum = 104, kOffBodyBytes = 112, kOffBodyChecksum = 120,
                 kOffHeaderCrcV1 = 128, kOffReserved3V1 = 132;
static_assert(kOffReserved3V1 + 4 == kPayloadHeaderBytesUnbound);
// Version 2 keeps bytes 0..127 and puts the chunk key before its CRC.
constexpr size_t kOffChunkKey = 128, kOffHeaderCrcV2 = 144, kOffReserved3V2 = 148;
static_assert(kOffReserved3V2 + 4 == kPayloadHeaderBytes);

// Offsets of the state record header.
constexpr size_t kStOffMagic = 0, kStOffVersion = 4, kStOffCodec = 6, kStOffCount = 8,
                 kStOffBoundary = 12, kStOffModel = 16, kStOffBodyBytes = 48,
                 kStOffHeaderCrc = 56, kStOffReserved = 60;
static_assert(kStOffReserved + 4 == kStateHeaderBytes);

constexpr uint16_t kKnownPayloadFlags = kPayloadFlagPartialChunk | kPayloadFlagLossy;

}  // namespace

Status AppendPayloadHeader(const PayloadHeader& h, std::vector<uint8_t>* out) {
  KVSTASH_RETURN_IF_ERROR(h.layout.Validate().WithContext("payload header"));
  const bool bound = h.chunk_key.has_value();
  const size_t size = h.header_bytes();
  const size_t crc_at = bound ? kOffHeaderCrcV2 : kOffHeaderCrcV1;
  uint8_t b[kPayloadHeaderBytes] = {};
  StoreLe<uint32_t>(b + kOffMagic, kPayloadMagic);
  StoreLe<uint16_t>(b + kOffVersion, bound ? kPayloadVersion : kPayloadVersionUnbound);
  StoreLe<uint16_t>(b + kOffHeaderBytes, static_cast<uint16_t>(size));
  StoreLe<uint16_t>(b + kOffCodec, static_cast<uint16_t>(h.codec));
  StoreLe<uint16_t>(b + kOffFlags, h.flags);
  b[kOffDtype] = static_cast<uint8_t>(h.layout.dtype);
  StoreLe<uint32_t>(b + kOffLayers, h.layout.n_layers);
  StoreLe<uint32_t>(b + kOffHeads, h.layout.n_kv_heads);
  StoreLe<uint32_t>(b + kOffHeadDim, h.layout.head_dim);
  StoreLe<uint32_t>(b + kOffTokens, h.tokens);
  StoreLe<uint32_t>(b + kOffTokenOffset, h.token_offset);
  std::copy(h.artifact_digest.begin(), h.artifact_digest.end(), b + kOffArtifact);
  std::copy(h.model_fingerprint.begin(), h.model_fingerprint.end(), b + kOffModel);
  StoreLe<uint64_t>(b + kOffContentChecksum, h.content_checksum);
  StoreLe<uint64_t>(b + kOffBodyBytes, h.body_bytes);
  StoreLe<uint64_t>(b + kOffBodyChecksum, h.body_checksum);
  if (bound) std::copy(h.chunk_key->begin(), h.chunk_key->end(), b + kOffChunkKey);
  StoreLe<uint32_t>(b + crc_at, Crc32c(std::span<const uint8_t>(b, crc_at)));
  out->insert(out->end(), b, b + size);
  return Status::Ok();
}

Result<PayloadHeader> ParsePayloadHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kPayloadHeaderBytesUnbound) {
    return Status::Corruption("payload shorter than its " +
                              std::to_string(kPayloadHeaderBytesUnbound) + "-byte header (" +
                              std::to_string(bytes.size()) + " bytes)");
  }
  const uint8_t* b = bytes.data();
  if (LoadLe<uint32_t>(b + kOffMagic) != kPayloadMagic) {
    return Status::Corruption("payload magic is not KVSP");
  }
  const uint16_t version = LoadLe<uint16_t>(b + kOffVersion);
  if (version != kPayloadVersion && version != kPayloadVersionUnbound) {
    return Status::Mismatch("payload format version " + std::to_string(version) +
                            " is not readable by this build (reads versions 1 and 2)");
  }
  const bool bound = version == kPayloadVersion;
  const size_t size = bound ? kPayloadHeaderBytes : kPayloadHeaderBytesUnbound;
  if (LoadLe<uint16_t>(b + kOffHeaderBytes) != size) {
    return Status::Corruption("payload header size field is not " + std::to_string(size) +
                              " (format version " + std::to_string(version) + ")");
  }
  if (bytes.size() < size) {
    return Status::Corruption("payload shorter than its " + std::to_string(size) +
                              "-byte header (" + std::to_string(bytes.size()) + " bytes)");
  }
  const size_t crc_at = bound ? kOffHeaderCrcV2 : kOffHeaderCrcV1;
  const uint32_t crc = Crc32c(std::span<const uint8_t>(b, crc_at));
  if (LoadLe<uint32_t>(b + crc_at) != crc) {
    return Status::Corruption("payload header CRC32C mismatch");
  }
  if (b[kOffReserved1] != 0 || LoadLe<uint16_t>(b + kOffReserved1 + 1) != 0 ||
      LoadLe<uint32_t>(b + kOffReserved2) != 0 ||
      LoadLe<uint32_t>(b + (bound ? kOffReserved3V2 : kOffReserved3V1)) != 0) {
    return Status::Corruption("payload header reserved bytes are not zero");
  }
  PayloadHeader h;
  if (bound) {
    h.chunk_key.emplace();
    std::copy(b + kOffChunkKey, b + kOffChunkKey + h.chunk_key->size(), h.chunk_key->begin());
  }
  h.codec = static_cast<CodecId>(LoadLe<uint16_t>(b + kOffCodec));
  h.flags = LoadLe<uint16_t>(b + kOffFlags);
  if ((h.flags & ~kKnownPayloadFlags) != 0) {
    return Status::Corruption("payload header has unknown flag bits");
  }
  if (!IsValidDType(b[kOffDtype])) return Status::Corruption("payload header dtype invalid");
  h.layout.dtype = static_cast<DType>(b[kOffDtype]);
  h.layout.n_layers = LoadLe<uint32_t>(b + kOffLayers);
  h.layout.n_kv_heads = LoadLe<uint32_t>(b + kOffHeads);
  h.layout.head_dim = LoadLe<uint32_t>(b + kOffHeadDim);
  if (Status s = h.layout.Validate(); !s.ok()) {
    return Status::Corruption("payload header layout: " + s.message());
  }
  h.tokens = LoadLe<uint32_t>(b + kOffTokens);
  if (h.tokens == 0 || h.tokens > kMaxChunkTokens) {
    return Status::Corruption("payload header token count out of range");
  }
  h.token_offset = LoadLe<uint32_t>(b + kOffTokenOffset);
  std::copy(b + kOffArtifact, b + kOffArtifact + 32, h.artifact_digest.begin());
  std::copy(b + kOffModel, b + kOffModel + 32, h.model_fingerprint.begin());
  h.content_checksum = LoadLe<uint64_t>(b + kOffContentChecksum);
  h.body_bytes = LoadLe<uint64_t>(b + kOffBodyBytes);
  h.body_checksum = LoadLe<uint64_t>(b + kOffBodyChecksum);
  return h;
}

PayloadHeader ChunkPayloadHeader(CodecId codec, const KvChunkView& chunk, uint32_t token_offset, bool partial,
                                 const Digest256& model_fingerprint) {
  PayloadHeader h;
  h.codec = codec;
  h.flags = partial ? kPayloadFlagPartialChunk : 0;
  h.layout = chunk.layout;
  h.tokens = chunk.tokens;
  h.token_offset = token_offset;
  h.model_fingerprint = model_fingerprint;
  h.content_checksum = chunk.ContentChecksum();
  return h;
}

Result<std::vector<uint8_t>> BuildPayload(PayloadHeader header, std::span<const uint8_t> body) {
  header.body_bytes = body.size();
  header.body_checksum = Xxh3_64(body);
  std::vector<uint8_t> out;
  out.reserve(header.header_bytes() + body.size());
  KVSTASH_RETURN_IF_ERROR(AppendPayloadHeader(header, &out));
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Result<PayloadView> ParsePayload(std::span<const uint8_t> bytes) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadHeader h, ParsePayloadHeader(bytes));
  const uint64_t have = bytes.size() - h.header_bytes();
  if (h.body_bytes != have) {
    return Status::Corruption("payload body is " + std::to_string(have) +
                              " bytes, header says " + std::to_string(h.body_bytes));
  }
  std::span<const uint8_t> body = bytes.subspan(h.header_bytes());
  if (Xxh3_64(body) != h.body_checksum) {
    return Status::Corruption("payload body checksum mismatch");
  }
  return PayloadView{h, body};
}

Result<std::vector<uint8_t>> BindPayloadToKey(std::span<const uint8_t> payload, const StoredKey& key) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadHeader h, ParsePayloadHeader(payload));
  if (h.chunk_key) {
    if (*h.chunk_key != key) {
      return Status::InvalidArgument("payload is bound to key " + ToHex(*h.chunk_key) +
                                     ", not to " + ToHex(key));
    }
    return std::vector<uint8_t>(payload.begin(), payload.end());
  }
  const std::span<const uint8_t> body = payload.subspan(kPayloadHeaderBytesUnbound);
  h.chunk_key = key;
  std::vector<uint8_t> out;
  out.reserve(kPayloadHeaderBytes + body.size());
  KVSTASH_RETURN_IF_ERROR(AppendPayloadHeader(h, &out));
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Status CheckPayloadKey(const PayloadHeader& header, const StoredKey& expected) {
  if (!header.chunk_key) {
    return Status::Mismatch(
        "payload format version 1 is not bound to a chunk key (written before format "
        "version 2, or by a codec directly): it cannot be tied to key " + ToHex(expected));
  }
  if (*header.chunk_key != expected) {
    return Status::Corruption("payload is bound to key " + ToHex(*header.chunk_key) +
                              ", not to the key " + ToHex(expected) +
                              " it was read for (a payload of another chunk)");
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> EncodeStateRecord(const RecurrentState& state,
                                               const Digest256& model_fingerprint) {
  KVSTASH_RETURN_IF_ERROR(state.Validate().WithContext("state record"));
  if (state.tensors.size() > kMaxStateTensors) {
    return Status::InvalidArgument("state has more than " +
                                   std::to_string(kMaxStateTensors) + " tensors");
  }
  std::vector<uint8_t> out(kStateHeaderBytes, 0);
  ByteWriter w(&out);
  for (const StateTensor& t : state.tensors) {
    w.U16(static_cast<uint16_t>(t.name.size()));
    w.Bytes(t.name);
    w.U8(static_cast<uint8_t>(t.dtype));
    w.U8(static_cast<uint8_t>(t.shape.size()));
    for (uint64_t d : t.shape) w.U64(d);
    w.U64(t.data.size());
    w.Bytes(t.data);
  }
  uint8_t* b = out.data();
  StoreLe<uint32_t>(b + kStOffMagic, kStateMagic);
  StoreLe<uint16_t>(b + kStOffVersion, kStateVersion);
  StoreLe<uint16_t>(b + kStOffCodec, 0);
  StoreLe<uint32_t>(b + kStOffCount, static_cast<uint32_t>(state.tensors.size()));
  StoreLe<uint32_t>(b + kStOffBoundary, state.boundary_tokens);
  std::copy(model_fingerprint.begin(), model_fingerprint.end(), b + kStOffModel);
  StoreLe<uint64_t>(b + kStOffBodyBytes, out.size() - kStateHeaderBytes);
  StoreLe<uint32_t>(b + kStOffHeaderCrc, Crc32c(std::span<const uint8_t>(b, kStOffHeaderCrc)));
  const uint64_t trailer = Xxh3_64(out);
  w.U64(trailer);
  return out;
}

Result<DecodedStateRecord> DecodeStateRecord(std::span<const uint8_t> bytes) {
  if (bytes.size() < kStateHeaderBytes + 8) {
    return Status::Corruption("state record shorter than header + trailer");
  }
  const uint8_t* b = bytes.data();
  if (LoadLe<uint32_t>(b + kStOffMagic) != kStateMagic) {
    return Status::Corruption("state record magic is not KVSS");
  }
  const uint16_t version = LoadLe<uint16_t>(b + kStOffVersion);
  if (version != kStateVersion) {
    return Status::Mismatch("state record version " + std::to_string(version) +
                            " is not readable by this build (reads version 1)");
  }
  if (LoadLe<uint32_t>(b + kStOffHeaderCrc) !=
      Crc32c(std::span<const uint8_t>(b, kStOffHeaderCrc))) {
    return Status::Corruption("state record header CRC32C mismatch");
  }
  if (LoadLe<uint16_t>(b + kStOffCodec) != 0) {
    return Status::Mismatch("state record codec " +
                            std::to_string(LoadLe<uint16_t>(b + kStOffCodec)) +
                            " is not readable by this build (reads 0 = raw)");
  }
  if (LoadLe<uint32_t>(b + kStOffReserved) != 0) {
    return Status::Corruption("state record reserved bytes are not zero");
  }
  const uint32_t count = LoadLe<uint32_t>(b + kStOffCount);
  if (count > kMaxStateTensors) return Status::Corruption("state record tensor count too large");
  const uint64_t body_bytes = LoadLe<uint64_t>(b + kStOffBodyBytes);
  if (body_bytes != bytes.size() - kStateHeaderBytes - 8) {
    return Status::Corruption("state record size does not match its header");
  }
  const size_t trailer_at = bytes.size() - 8;
  if (LoadLe<uint64_t>(b + trailer_at) != Xxh3_64(bytes.first(trailer_at))) {
    return Status::Corruption("state record checksum mismatch");
  }

  DecodedStateRecord rec;
  rec.state.boundary_tokens = LoadLe<uint32_t>(b + kStOffBoundary);
  std::copy(b + kStOffModel, b + kStOffModel + 32, rec.model_fingerprint.begin());
  ByteReader r(bytes.subspan(kStateHeaderBytes, body_bytes));
  rec.state.tensors.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    StateTensor t;
    uint16_t name_len = 0;
    uint8_t dtype = 0, rank = 0;
    std::span<const uint8_t> name;
    if (!r.U16(&name_len) || !r.Take(name_len, &name) || !r.U8(&dtype) || !r.U8(&rank)) {
      return Status::Corruption("state record truncated in tensor " + std::to_string(i));
    }
    if (!IsValidDType(dtype) || rank == 0 || rank > StateTensor::kMaxRank) {
      return Status::Corruption("state record tensor " + std::to_string(i) +
                                " has a bad dtype or rank");
    }
    t.name.assign(name.begin(), name.end());
    t.dtype = static_cast<DType>(dtype);
    t.shape.resize(rank);
    for (uint8_t d = 0; d < rank; ++d) {
      if (!r.U64(&t.shape[d])) return Status::Corruption("state record truncated in shape");
    }
    uint64_t data_bytes = 0;
    std::span<const uint8_t> data;
    if (!r.U64(&data_bytes) || !r.Take(data_bytes, &data)) {
      return Status::Corruption("state record truncated in tensor data");
    }
    t.data.assign(data.begin(), data.end());
    if (Status s = t.Validate(); !s.ok()) {
      return Status::Corruption("state record tensor: " + s.message());
    }
    rec.state.tensors.push_back(std::move(t));
  }
  if (r.remaining() != 0) return Status::Corruption("state record has trailing bytes");
  if (Status s = rec.state.Validate(); !s.ok()) {
    return Status::Corruption("state record: " + s.message());
  }
  return rec;
}

Status CheckPayloadKey(std::span<const uint8_t> payload, const StoredKey& expected) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadHeader h, ParsePayloadHeader(payload));
  return CheckPayloadKey(h, expected);
}

}  // namespace kvstash
