// Self-describing stored records: the chunk payload and the recurrent-state record.
// Byte layouts, field by field, are in docs/format/payload.md; this file implements
// them. All integers are little-endian.
//
// READ ME FIRST
// - A chunk payload = header + codec body. The header says everything needed to refuse
//   a payload that is not ours to decode: format version, codec id, codec artifact
//   digest, model fingerprint, layout, token count, the XXH3-64 of the DECODED
//   canonical chunk bytes (kvstash/kv_chunk.h), and the body's size and XXH3-64. It ends
//   with a CRC32C of the bytes before it.
// - Two header versions. A codec writes version 1 (136 bytes): a payload not yet bound
//   to a key, the unit codecs and their golden digests work on. What is stored is
//   version 2 (152 bytes): the same fields plus the 128-bit chunk key the payload is
//   stored under (BindPayloadToKey). The server refuses a PUT whose payload is not bound
//   to the PUT's key, and every decoder that asked for a key checks the payload's
//   (CheckPayloadKey), so a valid payload served under another key (a storage or proxy
//   fault) is Corruption, never KV of another prefix.
// - Parsers never trust a length: every size is checked against the input before it
//   is used, and any malformed input returns Corruption (or Mismatch for a version we
//   do not read), never UB. A libFuzzer target (fuzz/payload_fuzz.cc) runs in CI.
// - The recurrent-state record is stored beside the chunk payload at a boundary; it is
//   byte-exact (codec 0, raw) with an XXH3-64 trailer over the whole record.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash {

// Codec ids in payload headers. Never renumber; docs/format/payload.md lists them.
enum class CodecId : uint16_t {
  kRaw = 0,        // canonical chunk bytes as they are
  kSpec = 1,       // speculative KV coding (lossless, predictor-based)
  kDckv = 2,       // learned transform coding (lossy)
  kBytePlane = 3,  // model-free byte-plane rANS (baseline)
  kKvtc = 4,       // KVTC-like PCA + bit allocation (baseline)
  kZstd = 5,       // zstd on the canonical bytes (baseline)
};

// True for the ids listed above; a payload with another id is refused on PUT.
inline bool IsKnownCodec(CodecId c) { return static_cast<uint16_t>(c) <= 5; }

inline constexpr uint32_t kPayloadMagic = 0x5053564B;  // "KVSP" as bytes
// Version 1: the unbound header a codec writes; version 2: bound to a chunk key.
inline constexpr uint16_t kPayloadVersionUnbound = 1;
inline constexpr uint16_t kPayloadVersion = 2;
inline constexpr uint16_t kPayloadHeaderBytesUnbound = 136;
inline constexpr uint16_t kPayloadHeaderBytes = 152;
// Header flags.
inline constexpr uint16_t kPayloadFlagPartialChunk = 1u << 0;  // final partial chunk
inline constexpr uint16_t kPayloadFlagLossy = 1u << 1;         // decoded != original

struct PayloadHeader {
  CodecId codec = CodecId::kRaw;
  uint16_t flags = 0;
  KvLayout layout;                // layers, kv heads, head_dim, dtype of the decoded KV
  uint32_t tokens = 0;            // tokens in this chunk
  uint32_t token_offset = 0;      // position of the chunk's first token in its prefix
  Digest256 artifact_digest{};    // codec artifact (zeros for codecs without one)
  Digest256 model_fingerprint{};  // target model's weights digest
  uint64_t content_checksum = 0;  // XXH3-64 of the decoded canonical chunk
  uint64_t body_bytes = 0;        // bytes after the header
  uint64_t body_checksum = 0;     // XXH3-64 of those bytes
  // The stored key (kvstash/prefix_key.h, the client's key before the server's tenant
  // scoping) this payload is bound to; nullopt for an unbound (version 1) header.
  std::optional<StoredKey> chunk_key;

  // 152 for a bound header, 136 for an unbound one.
  size_t header_bytes() const { return chunk_key ? kPayloadHeaderBytes : kPayloadHeaderBytesUnbound; }
  bool operator==(const PayloadHeader&) const = default;
};

// Appends the header (version 2, 152 bytes, when chunk_key is set, else version 1,
// 136 bytes), computing its CRC32C, to `out`.
// REQUIRES: header.layout valid (InvalidArgument otherwise, nothing appended).
Status AppendPayloadHeader(const PayloadHeader& header, std::vector<uint8_t>* out);

// Parses the header (version 1 or 2) at the start of `bytes` (extra bytes after it are
// ignored). Errors: Corruption for short input, bad magic, CRC mismatch, nonzero
// reserved fields, an invalid layout or dtype, 0 tokens; Mismatch for an unknown
// version.
Result<PayloadHeader> ParsePayloadHeader(std::span<const uint8_t> bytes);

// A parsed whole payload: header plus a view of its body inside the input.
struct PayloadView {
  PayloadHeader header;
  std::span<const uint8_t> body;
};

// The header of a payload that codes `chunk` with `codec`: its layout, token count and
// content checksum (KvChunkView::ContentChecksum), at position `token_offset` of its prefix,
// flagged kPayloadFlagPartialChunk when `partial`. artifact_digest and chunk_key stay
// unset (the caller sets them where its codec has them); BuildPayload fills the body
// fields. Reads `chunk.data` once (the checksum); no errors.
PayloadHeader ChunkPayloadHeader(CodecId codec, const KvChunkView& chunk, uint32_t token_offset, bool partial,
                                 const Digest256& model_fingerprint);

// Builds a whole payload: header (with body_bytes/body_checksum filled from `body`)
// followed by the body.
Result<std::vector<uint8_t>> BuildPayload(PayloadHeader header, std::span<const uint8_t> body);

// Parses a whole payload: the header, then checks that exactly body_bytes follow and
// that their XXH3-64 matches. Errors: ParsePayloadHeader's, and Corruption for a size
// or body checksum mismatch.
Result<PayloadView> ParsePayload(std::span<const uint8_t> bytes);

// Binds a payload to the key it is stored under: returns the version-2 payload with
// `key` in its header and the same body. A payload already bound to `key` comes back
// unchanged. Only the header is parsed (the body is copied, not verified).
// Errors: ParsePayloadHeader's; InvalidArgument for a payload bound to another key.
Result<std::vector<uint8_t>> BindPayloadToKey(std::span<const uint8_t> payload, const StoredKey& key);

// Ok when `header` is bound to `expected` (the key the reader asked for).
// Errors: Corruption when it is bound to another key (the payload of another chunk);
// Mismatch for an unbound (version 1) header, which a reader of stored KV cannot tie to
// its key.
Status CheckPayloadKey(const PayloadHeader& header, const StoredKey& expected);
// The same on a whole payload's bytes (ParsePayloadHeader's errors first).
Status CheckPayloadKey(std::span<const uint8_t> payload, const StoredKey& expected);

inline constexpr uint32_t kStateMagic = 0x5353564B;  // "KVSS"
inline constexpr uint16_t kStateVersion = 1;
inline constexpr uint16_t kStateHeaderBytes = 64;
// Upper bound on tensors in one state record (Qwen3.5-class models have ~50).
inline constexpr uint32_t kMaxStateTensors = 4096;

// Serialises a recurrent state record (codec 0: raw, byte-exact).
// Errors: InvalidArgument if state.Validate() fails.
Result<std::vector<uint8_t>> EncodeStateRecord(const RecurrentState& state,
                                               const Digest256& model_fingerprint);

struct DecodedStateRecord {
  RecurrentState state;
  Digest256 model_fingerprint{};
};

// Parses a state record. Errors: Corruption for any malformed or truncated input or
// checksum mismatch; Mismatch for an unknown version or codec.
Result<DecodedStateRecord> DecodeStateRecord(std::span<const uint8_t> bytes);

}  // namespace kvstash
