// Prefix keys: the namespace digest and the chained chunk keys of docs/format/keys.md.
//
// A namespace is everything that makes two KV caches of the same tokens differ: model
// weights, KV dtype and layout, chunk size, tensor-parallel rank, LoRA adapter, cache
// salt, tenant, codec. Its digest is SHA-256 over tagged, length-prefixed fields, so no
// two different field sets serialise alike (an adapter name equal to a cache salt
// still differs: the tags differ).
//
// Chunk i of a prompt (tokens [i*C, (i+1)*C)) has key
//   key_i = SHA-256(kind || key_{i-1} || u32 n || tokens as u32 LE || u32 n_extra ||
//                   (u32 len || bytes) per extra key)
// with key_{-1} = namespace digest and kind 0x01 for a full chunk, 0x02 for a final
// partial chunk (stored only under its exact length, never served as a full chunk).
// Stored keys are the first 16 bytes (128 bits). The spec and test vectors are in
// docs/format/keys.md and tests/common/data/key_vectors.json; tools/kvstash_tools/keys.py is
// an independent Python implementation.
//
// Hash: SHA-256 (FIPS 180-4) from OpenSSL.
// Thread-safety: all functions are reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/dtype.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"
#include "kvstash/sha256.h"

namespace kvstash {

using StoredKey = std::array<uint8_t, 16>;

// The fields of a namespace. Strings are opaque bytes; empty means "none".
struct Namespace {
  std::string model_fingerprint;      // digest of the target model's weights (bytes)
  KvLayout layout;                    // KV layout and dtype as stored
  uint32_t chunk_tokens = 256;        // tokens per chunk (C)
  uint32_t tp_rank = 0;               // tensor-parallel rank of this shard
  uint32_t tp_size = 1;               // tensor-parallel world size
  std::string adapter_name;           // LoRA adapter name
  std::string adapter_id;             // LoRA adapter id (engines' int id, as text)
  std::string adapter_digest;         // digest of the adapter weights
  std::string cache_salt;             // per-request salt (vLLM cache_salt)
  std::string tenant;                 // tenant bound by the server's credential check
  std::string codec_id;               // "raw", "spec", "dckv", ...
  std::string codec_artifact_digest;  // digest of the codec artifact (tables, basis)

  // InvalidArgument if the layout is invalid, chunk_tokens is 0 or above
  // kMaxChunkTokens, tp_size is 0 or tp_rank >= tp_size.
  Status Validate() const;
};

// Field tags of the namespace encoding (docs/format/keys.md). Never renumber.
enum class NamespaceTag : uint8_t {
  kVersion = 0x00,
  kModelFingerprint = 0x01,
  kKvDtype = 0x02,
  kLayout = 0x03,
  kChunkTokens = 0x04,
  kTensorParallel = 0x05,
  kAdapterName = 0x06,
  kAdapterId = 0x07,
  kAdapterDigest = 0x08,
  kCacheSalt = 0x09,
  kTenant = 0x0A,
  kCodecId = 0x0B,
  kCodecArtifactDigest = 0x0C,
};

// The exact bytes hashed for a namespace (exposed for tests and other languages).
std::vector<uint8_t> EncodeNamespace(const Namespace& spec);
// SHA-256 of EncodeNamespace(spec). Errors: Validate()'s.
Result<Digest256> NamespaceDigest(const Namespace& spec);

// Key of one chunk.
struct ChunkKey {
  Digest256 digest{};    // full SHA-256; the next chunk chains on all 32 bytes
  uint32_t tokens = 0;   // tokens in this chunk
  bool partial = false;  // final chunk shorter than chunk_tokens

  StoredKey stored() const;
};

// Keys of the chunks of `tokens` under namespace digest `ns`: one per full chunk of
// `chunk_tokens`, plus one partial-chunk key for a non-empty remainder when
// `include_partial`. `extra_keys`, when not empty, has one list of extra key strings
// (multimodal/embedding digests) per returned chunk.
// Errors: InvalidArgument for chunk_tokens 0 or a wrong extra_keys count.
Result<std::vector<ChunkKey>> ComputeChunkKeys(const Digest256& ns, std::span<const uint32_t> tokens,
                                               uint32_t chunk_tokens, bool include_partial,
                                               std::span<const std::vector<std::string>> extra_keys = {});

// Lowercase hex of bytes.
std::string ToHex(std::span<const uint8_t> bytes);

}  // namespace kvstash
