// kvstash::PrefixCodec: the client-side codec layer (DESIGN.md §1, "client -> codec for
// client-side coding"). For ONE namespace (model fingerprint, bf16 KV layout, chunk
// size, tenant, codec raw|spec|dckv and its artifact) it turns
//   (prefix tokens, exact KV cache of the prefix)  ->  the PutChunks of the prefix chain
// and turns
//   (GET payloads of the first m chunks, the tokens they cover)  ->  the restored cache.
// The network calls stay with kvstash::Client (client.h): this class never opens a
// socket, so an engine can pipeline Lookup/Get/Put as it likes.
//
// READ ME FIRST
// - The chain of a prefix is its full chunks plus, when the prefix length is not a
//   multiple of chunk_tokens, one final PARTIAL chunk keyed under its exact length
//   (docs/format/keys.md, kind 0x02). An application that knows where its reusable
//   prefix ends (system prompt + RAG document) stores the whole of it, as LMCache's
//   save_unfull_chunk does; a longer prefix sharing the full chunks still hits them.
// - Stored KV is bf16 (KvLayout dtype kBF16), rounded to nearest even from the
//   runtime's fp32 cache (model/forward/kv_export.h). "Exact" below means bit-identical to
//   ToKvChunk(exact fp32 cache, bf16): raw and spec restore exactly that; dckv is lossy.
// - spec: both sides run the deterministic SpecPredictor (model/predictor/spec_predictor.h) over
//   the prefix tokens; EncodeChunks runs it over tokens [0, end of the last chunk put),
//   Restore over the matched tokens. Its cost is reported separately (predictor_ms).
//   The spec payloads' streams are coded on the predictor's thread count.
// - Restore never returns KV that fails a check: a payload of another codec, artifact or
//   model is Mismatch; a damaged one is Corruption (codec-level checks plus the header's
//   content checksum of the decoded chunk, verified by every decoder).
//
// Shapes: model::KvCache per layer [tokens, n_kv_heads, head_dim] fp32, K after RoPE.
// Thread-safety: immutable after Create; all const methods may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/dckv/dckv_codec.h"
#include "codec/spec/spec_artifact.h"
#include "common/kv_chunk.h"
#include "common/prefix_key.h"
#include "common/result.h"
#include "kvstash/client.h"
#include "model/forward/kv_cache.h"
#include "model/forward/model.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash {

enum class PrefixCodecKind : uint8_t { kRaw, kSpec, kDckv };

// "raw", "spec", "dckv".
const char* PrefixCodecName(PrefixCodecKind kind);
// Inverse of PrefixCodecName. InvalidArgument for any other text.
Result<PrefixCodecKind> ParsePrefixCodecKind(const std::string& name);

struct PrefixCodecOptions {
  PrefixCodecKind kind = PrefixCodecKind::kRaw;
  // SHA-256 of the target model's weights file (or any digest of the weights); enters
  // the namespace and every payload header. Default: zeros (set it).
  Digest256 model_fingerprint{};
  uint32_t chunk_tokens = 256;  // tokens per chunk. Default: 256.
  std::string tenant;           // the server tenant (part of the namespace). Default: "".
  std::string cache_salt;       // per-deployment salt. Default: "".
};

// Where the time of EncodeChunks went (milliseconds of wall time).
struct PrefixEncodeStats {
  double predictor_ms = 0;  // spec: SpecPredictor::Run over the prefix
  double encode_ms = 0;     // bf16 conversion + codec encode of the chunks
  uint64_t raw_bytes = 0;   // bf16 canonical bytes of the chunks encoded
  uint64_t stored_bytes = 0;  // payload bytes (headers included)
};

// Where the time of Restore went (milliseconds of wall time).
struct PrefixRestoreStats {
  double predictor_ms = 0;  // spec: SpecPredictor::Run over the matched tokens
  double decode_ms = 0;     // codec decode + checksum verification
  double assemble_ms = 0;   // bf16 chunks -> fp32 KvCache
};

// A restored prefix: the decoded canonical bf16 chunks (in chain order) and the fp32
// cache built from them (what Prefill continues from).
struct RestoredPrefix {
  std::vector<KvChunk> chunks;
  model::KvCache cache;
};

class PrefixCodec {
 public:
  // REQUIRES for all: `model` outlives the codec.
  // Errors: InvalidArgument for chunk_tokens 0 or above kMaxChunkTokens, or an options
  // kind that differs from the factory's.
  static Result<std::unique_ptr<PrefixCodec>> CreateRaw(const model::Model& model,
                                                        const PrefixCodecOptions& options);
  // `predictor` must be the predictor the artifact was calibrated with (Mismatch if its
  // Digest() differs from artifact.predictor_digest); InvalidArgument if the artifact's
  // layout is not the model's bf16 layout.
  static Result<std::unique_ptr<PrefixCodec>> CreateSpec(
      const model::Model& model, std::shared_ptr<const model::SpecPredictor> predictor,
      spec::SpecArtifact artifact, const PrefixCodecOptions& options);
  // InvalidArgument if the artifact's shape is not the model's or it is not usable.
  static Result<std::unique_ptr<PrefixCodec>> CreateDckv(const model::Model& model,
                                                         dckv::DckvArtifact artifact,
                                                         const PrefixCodecOptions& options);

  PrefixCodecKind kind() const { return options_.kind; }
  const PrefixCodecOptions& options() const { return options_; }
  // Stored layout: the model's (n_layers, n_kv_heads, head_dim), bf16.
  const KvLayout& layout() const { return layout_; }
  // Namespace digest (docs/format/keys.md) of this codec's chains.
  const Digest256& namespace_digest() const { return namespace_; }
  // SHA-256 of the artifact (zeros for raw).
  const Digest256& artifact_digest() const { return artifact_digest_; }

  // Keys of the chain of `tokens` (full chunks, then a partial one for a remainder).
  // Errors: InvalidArgument for an empty prefix.
  Result<std::vector<ChunkKey>> ChainKeys(std::span<const uint32_t> tokens) const;
  // The same keys as Client::Lookup takes them.
  static std::vector<ChunkRef> LookupChain(std::span<const ChunkKey> keys);

  // Encodes chunks [first_chunk, keys.size()) of the chain of `tokens` from `exact`, the
  // cache of at least tokens.size() tokens of exactly these tokens. Chunk i > 0 names
  // chunk i-1 as its parent; every chunk routes by chunk 0's key.
  // Errors: InvalidArgument for an empty prefix, a cache shaped for another model or
  // shorter than the prefix, first_chunk beyond the chain; codec errors.
  Result<std::vector<PutChunk>> EncodeChunks(std::span<const uint32_t> tokens,
                                             const model::KvCache& exact, uint32_t first_chunk,
                                             PrefixEncodeStats* stats = nullptr) const;

  // Decodes the payloads of chunks [0, payloads.size()) of the chain of `tokens` (the
  // prefix those chunks cover; payloads.size() <= number of chunks) and builds the cache.
  // Errors: InvalidArgument for no payloads or more payloads than chunks; Mismatch for a
  // payload of another codec/artifact/model/layout, a token count or offset that is not
  // the chunk's, or (spec) a predictor that disagrees; Corruption for a damaged payload.
  Result<RestoredPrefix> Restore(std::span<const uint32_t> tokens,
                                 std::span<const std::vector<uint8_t>> payloads,
                                 PrefixRestoreStats* stats = nullptr) const;

  // Tokens covered by the first `chunks` chunks of the chain of a `prefix_tokens`-token
  // prefix.
  uint64_t TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const;

 private:
  PrefixCodec(const model::Model& model, PrefixCodecOptions options);
  Status Init();
  // chunk_tokens: the chunk's token ids (dckv's token-conditioned models carry them).
  Result<std::vector<uint8_t>> EncodeOne(const KvChunk& chunk,
                                         std::span<const uint32_t> chunk_tokens,
                                         uint32_t token_offset, uint32_t prefix_tokens,
                                         const model::PredictorCache* prediction) const;
  Result<KvChunk> DecodeOne(std::span<const uint8_t> payload, uint32_t token_offset,
                            uint32_t tokens, const model::PredictorCache* prediction) const;

  const model::Model* model_;
  PrefixCodecOptions options_;
  KvLayout layout_;
  Digest256 namespace_{};
  Digest256 artifact_digest_{};
  std::shared_ptr<const model::SpecPredictor> predictor_;  // spec only
  std::unique_ptr<spec::SpecArtifact> spec_artifact_;      // spec only
  std::unique_ptr<dckv::DckvCodec> dckv_;                  // dckv only
};

}  // namespace kvstash
