// kvstash::PrefixCodec: the client-side codec layer (docs/architecture.md §1, "client -> codec for
// client-side coding"). For ONE namespace (every field of docs/format/keys.md: model
// fingerprint, KV layout and dtype, chunk size, tensor-parallel rank/size, LoRA adapter,
// cache salt, tenant, codec raw|spec|dckv and its artifact) it turns
//   (prefix tokens, exact KV of the prefix)  ->  the PutChunks of the prefix chain
// and turns
//   (GET payloads of the first m chunks, the tokens they cover)  ->  the restored KV.
// Two forms of the KV: the reference runtime's fp32 model::KvCache (EncodeChunks /
// Restore), and an engine's canonical KvChunks (EncodeKvChunks / RestoreKvChunks: what
// the llama.cpp and vLLM integrations gather from their caches and scatter back).
// The network calls stay with kvstash::Client (client.h): this class never opens a
// socket, so an engine can pipeline Lookup/Get/Put as it likes.
//
// READ ME FIRST
// - The chain of a prefix is its full chunks plus, when the prefix length is not a
//   multiple of chunk_tokens, one final PARTIAL chunk keyed under its exact length
//   (docs/format/keys.md, kind 0x02). An application that knows where its reusable
//   prefix ends (system prompt + RAG document) stores the whole of it, as LMCache's
//   save_unfull_chunk does; a longer prefix sharing the full chunks still hits them.
// - A chain's keys depend on more than token ids when the KV does: images, audio or
//   prompt embeddings (token ids 0 in vLLM), which go in as per-chunk extra keys
//   (ChainInputs::WithExtraKeys, e.g. SHA-256 of each image's pixels or of the
//   embedding tensor, listed on the chunks whose positions they cover). ChainInputs has
//   no default: a caller states TokensOnly() or passes the extra keys, so two requests
//   that differ only in what their token ids do not show can never share keys silently.
// - Stored KV has dtype options.kv_dtype: bf16 (default) or f16 (llama.cpp's default),
//   rounded to nearest even from the runtime's fp32 cache (model/forward/kv_export.h), or given
//   by the engine as is. "Exact" below means bit-identical to those chunks: raw and spec
//   restore exactly that; dckv is lossy. raw and dckv take bf16 and f16 (a dckv artifact
//   is dtype-free: f16 chunks decode to f16); spec takes the dtype its artifact was
//   calibrated for (a bf16 or an f16 artifact, codec/spec/spec_calibration.h).
// - spec: both sides run the deterministic SpecPredictor (model/predictor/spec_predictor.h) over
//   the prefix tokens; EncodeChunks runs it over tokens [0, end of the last chunk put),
//   Restore over the matched tokens. Its cost is reported separately (predictor_ms).
//   The spec payloads' streams are coded on the predictor's thread count.
// - Every payload it encodes is bound to its chunk key (payload format version 2,
//   docs/format/payload.md), and Restore checks each payload's key against the chain's:
//   a valid payload of another chunk (a storage or proxy fault) is Corruption.
// - Restore never returns KV that fails a check: a payload of another codec, artifact or
//   model, or one not bound to a key (format version 1), is Mismatch; a damaged one, or
//   one bound to another key, is Corruption (codec-level checks plus the header's
//   content checksum of the decoded chunk, verified by every decoder).
// - The heavy state (model, predictor, spec artifact, dckv codec) can be shared by the
//   codecs of many namespaces (the shared_ptr factories): what a namespace costs on its
//   own is its options and its digest. It stays behind PrefixCodec::Impl: this header
//   only declares the model and codec types its factories and runtime forms take.
//
// Shapes: model::KvCache per layer [tokens, n_kv_heads, head_dim] fp32, K after RoPE.
// Thread-safety: immutable after Create; all const methods may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash {

// The project's types that the factories and the runtime forms take, declared only:
// a caller that builds a model, predictor or artifact includes their own headers
// (model/forward/model.h, model/forward/kv_cache.h, model/predictor/spec_predictor.h,
// codec/spec/spec_artifact.h, codec/dckv/dckv_codec.h); a caller of the engine forms
// (KvChunk) needs none of them.
namespace model {
struct Model;
struct KvCache;
class SpecPredictor;
struct PredictorCache;
}  // namespace model
namespace spec {
struct SpecArtifact;
}  // namespace spec
namespace dckv {
struct DckvArtifact;
class DckvCodec;
}  // namespace dckv

enum class PrefixCodecKind : uint8_t { kRaw, kSpec, kDckv };

// "raw", "spec", "dckv".
const char* PrefixCodecName(PrefixCodecKind kind);
// Inverse of PrefixCodecName. InvalidArgument for any other text.
Result<PrefixCodecKind> ParsePrefixCodecKind(const std::string& name);

// The namespace fields (docs/format/keys.md) and the codec of one PrefixCodec. Fixed
// at Create.
struct PrefixCodecOptions {
  PrefixCodecKind kind = PrefixCodecKind::kRaw;
  // SHA-256 of the target model's weights file (or any digest of the weights); enters
  // the namespace and every payload header. Default: zeros (set it).
  Digest256 model_fingerprint{};
  uint32_t chunk_tokens = 256;  // tokens per chunk. Default: 256.
  std::string tenant;           // the server tenant (part of the namespace). Default: "".
  std::string cache_salt;       // per-request or per-deployment salt. Default: "".
  DType kv_dtype = DType::kBF16;  // stored KV dtype: kBF16 or kF16. Default: kBF16.
  uint32_t tp_rank = 0;         // tensor-parallel rank of this shard's KV. Default: 0.
  uint32_t tp_size = 1;         // tensor-parallel world size. Default: 1.
  // LoRA adapter whose KV this is (all empty: the base model). Engines set the id and
  // the digest of the adapter weights; the name alone is not enough to tell two
  // adapters apart. Default: "".
  std::string adapter_name;
  std::string adapter_id;
  std::string adapter_digest;
};

// What besides the token ids determines the KV of each chunk of a chain. There is no
// default constructor: every caller states which case it is in.
class ChainInputs {
 public:
  // The KV depends on the token ids (and the namespace) alone: plain text prompts.
  static ChainInputs TokensOnly() { return ChainInputs({}, true); }
  // per_chunk[i]: the extra keys of chain chunk i (multimodal input or prompt-embedding
  // digests whose positions fall in that chunk; an empty list for a chunk with none).
  // It must have one entry per chunk of the chain it is used with (InvalidArgument
  // otherwise, from ChainKeys).
  static ChainInputs WithExtraKeys(std::vector<std::vector<std::string>> per_chunk) {
    return ChainInputs(std::move(per_chunk), false);
  }
  const std::vector<std::vector<std::string>>& extra_keys() const { return extra_keys_; }
  bool tokens_only() const { return tokens_only_; }

 private:
  ChainInputs(std::vector<std::vector<std::string>> e, bool tokens_only)
      : extra_keys_(std::move(e)), tokens_only_(tokens_only) {}
  std::vector<std::vector<std::string>> extra_keys_;
  bool tokens_only_;
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

// A restored prefix: the decoded canonical chunks (in chain order) and the fp32
// cache built from them (what Prefill continues from). Moving and destroying one needs
// no model header; reading the cache needs model/forward/kv_cache.h.
struct RestoredPrefix {
  RestoredPrefix();
  RestoredPrefix(RestoredPrefix&&) noexcept;
  RestoredPrefix& operator=(RestoredPrefix&&) noexcept;
  ~RestoredPrefix();
  std::vector<KvChunk> chunks;
  std::unique_ptr<model::KvCache> cache;  // never null in what Restore returns
};

class PrefixCodec {
 public:
  // REQUIRES for the factories that take one: `model` outlives the codec.
  // Errors (all): InvalidArgument for chunk_tokens 0 or above kMaxChunkTokens, tp_size 0
  // or tp_rank >= tp_size, a kv_dtype other than bf16/f16 (or one the codec's artifact
  // was not calibrated for), or an options kind that differs from the factory's.
  static Result<std::unique_ptr<PrefixCodec>> CreateRaw(const model::Model& model,
                                                        const PrefixCodecOptions& options);
  // Raw coding of an engine's KV without our runtime: `layout` is the stored shape per
  // token (its dtype is replaced by options.kv_dtype). EncodeChunks/Restore (the fp32
  // KvCache forms) return InvalidArgument on such a codec; the KvChunk forms work.
  static Result<std::unique_ptr<PrefixCodec>> CreateRaw(const KvLayout& layout,
                                                        const PrefixCodecOptions& options);
  // `predictor` must be the predictor the artifact was calibrated with (Mismatch if its
  // Digest() differs from artifact.predictor_digest); InvalidArgument if the artifact's
  // layout is not the model's layout in options.kv_dtype.
  static Result<std::unique_ptr<PrefixCodec>> CreateSpec(
      const model::Model& model, std::shared_ptr<const model::SpecPredictor> predictor,
      spec::SpecArtifact artifact, const PrefixCodecOptions& options);
  // The same with an artifact shared by other codecs (InvalidArgument if null).
  static Result<std::unique_ptr<PrefixCodec>> CreateSpec(
      const model::Model& model, std::shared_ptr<const model::SpecPredictor> predictor,
      std::shared_ptr<const spec::SpecArtifact> artifact, const PrefixCodecOptions& options);
  // InvalidArgument if the artifact's shape is not the model's or it is not usable.
  static Result<std::unique_ptr<PrefixCodec>> CreateDckv(const model::Model& model,
                                                         dckv::DckvArtifact artifact,
                                                         const PrefixCodecOptions& options);
  // The same with a codec (built from its artifact once) shared by other codecs
  // (InvalidArgument if null).
  static Result<std::unique_ptr<PrefixCodec>> CreateDckv(const model::Model& model,
                                                         std::shared_ptr<const dckv::DckvCodec> codec,
                                                         const PrefixCodecOptions& options);

  ~PrefixCodec();
  PrefixCodec(const PrefixCodec&) = delete;
  PrefixCodec& operator=(const PrefixCodec&) = delete;

  PrefixCodecKind kind() const;
  const PrefixCodecOptions& options() const;
  // Stored layout: the model's (n_layers, n_kv_heads, head_dim), dtype options.kv_dtype.
  const KvLayout& layout() const;
  // Namespace digest (docs/format/keys.md) of this codec's chains.
  const Digest256& namespace_digest() const;
  // SHA-256 of the artifact (zeros for raw).
  const Digest256& artifact_digest() const;

  // Keys of the chain of `tokens` (full chunks, then a partial one for a remainder).
  // Errors: InvalidArgument for an empty prefix or extra keys that do not have one list
  // per chunk of the chain.
  Result<std::vector<ChunkKey>> ChainKeys(std::span<const uint32_t> tokens,
                                          const ChainInputs& inputs) const;
  // The same keys as Client::Lookup takes them.
  static std::vector<ChunkRef> LookupChain(std::span<const ChunkKey> keys);

  // Encodes chunks [first_chunk, keys.size()) of the TokensOnly() chain of `tokens` from
  // `exact`, the runtime's cache of at least tokens.size() tokens of exactly these
  // tokens. Chunk i > 0 names chunk i-1 as its parent; every chunk routes by chunk 0's
  // key.
  // Errors: InvalidArgument for an empty prefix, a cache shaped for another model or
  // shorter than the prefix, first_chunk beyond the chain, a codec made without a model;
  // codec errors.
  Result<std::vector<PutChunk>> EncodeChunks(std::span<const uint32_t> tokens,
                                             const model::KvCache& exact, uint32_t first_chunk,
                                             PrefixEncodeStats* stats = nullptr) const;

  // Decodes the payloads of chunks [0, payloads.size()) of the TokensOnly() chain of
  // `tokens` (the prefix those chunks cover; payloads.size() <= number of chunks) and
  // builds the runtime's fp32 cache (InvalidArgument for a codec made without a model).
  // Errors: InvalidArgument for no payloads or more payloads than chunks; Mismatch for a
  // payload of another codec/artifact/model/layout, a token count or offset that is not
  // the chunk's, an unbound (format version 1) payload, or (spec) a predictor that
  // disagrees; Corruption for a damaged payload or one bound to another chunk's key.
  Result<RestoredPrefix> Restore(std::span<const uint32_t> tokens,
                                 std::span<const std::vector<uint8_t>> payloads,
                                 PrefixRestoreStats* stats = nullptr) const;

  // The engine form of EncodeChunks. `keys` is ChainKeys(tokens, inputs) for the same
  // tokens; chunks[j] is chain chunk first_chunk + j in the canonical layout
  // (kvstash/kv_chunk.h: per layer K [T, n_kv_heads, head_dim] then V, dtype
  // options.kv_dtype, K after RoPE) with keys[first_chunk + j].tokens tokens, and
  // chunks.size() == keys.size() - first_chunk.
  // Errors: InvalidArgument for an empty prefix, keys that are not a chain of `tokens`
  // (count or token counts), first_chunk beyond the chain, a chunk of another layout or
  // length, or a chunk count that does not cover the rest of the chain; codec errors.
  Result<std::vector<PutChunk>> EncodeKvChunks(std::span<const uint32_t> tokens,
                                               std::span<const ChunkKey> keys,
                                               std::span<const KvChunk> chunks,
                                               uint32_t first_chunk,
                                               PrefixEncodeStats* stats = nullptr) const;

  // The engine form of Restore: decodes and verifies the payloads of chain chunks
  // [0, payloads.size()) and returns their canonical chunks in chain order (layout(),
  // keys[i].tokens tokens each). `keys` as for EncodeKvChunks. The keys are trusted: each
  // payload is checked against the key it is given (key binding), and the keys are
  // checked only for their count and token counts (their digests cannot be recomputed
  // here: they may include extra keys), so keys of other tokens restore THOSE tokens'
  // KV. Compute them with ChainKeys from these very tokens and inputs.
  // Errors: those of Restore (Mismatch for a payload of another codec, artifact, model,
  // layout or position, or a predictor that disagrees; Corruption for a damaged
  // payload or one bound to another key), and InvalidArgument for keys whose count or
  // token counts are not those of the chain of `tokens`.
  Result<std::vector<KvChunk>> RestoreKvChunks(std::span<const uint32_t> tokens,
                                               std::span<const ChunkKey> keys,
                                               std::span<const std::vector<uint8_t>> payloads,
                                               PrefixRestoreStats* stats = nullptr) const;
  // The same over payloads held elsewhere (e.g. the buffers of a binding), read in place:
  // no copy of them. REQUIRES: the payloads' memory stays unchanged during the call.
  Result<std::vector<KvChunk>> RestoreKvChunks(std::span<const uint32_t> tokens,
                                               std::span<const ChunkKey> keys,
                                               std::span<const std::span<const uint8_t>> payloads,
                                               PrefixRestoreStats* stats = nullptr) const;

  // raw only: RestoreKvChunks without its copy. A raw payload's body is the canonical
  // chunk, so after every check RestoreKvChunks makes (chain, header of this codec,
  // model, layout and position, key binding, body size, content checksum) chunk i is
  // returned as a view of payload i's body. The views alias the payloads: they are
  // valid while those live, and what they show was verified only while the payloads
  // stay unchanged (a caller must hold them immutable, e.g. read-only buffers it owns).
  // payloads[j] is chain chunk first_chunk + j (0 by default: the chain's first chunks),
  // so an engine can verify and use each chunk as its GET completes.
  // Errors: those of RestoreKvChunks; InvalidArgument for a spec or dckv codec (their
  // payloads are coded: use RestoreKvChunks) or payloads past the chain's end.
  Result<std::vector<KvChunkView>> ViewRawKvChunks(std::span<const uint32_t> tokens,
                                                   std::span<const ChunkKey> keys,
                                                   std::span<const std::span<const uint8_t>> payloads,
                                                   uint32_t first_chunk = 0) const;

  // The checks RestoreKvChunks makes before it decodes: keys are the chain of `tokens`,
  // 1 <= payloads.size() <= keys.size(), and payload i's header covers chain chunk i's
  // tokens and is bound to chain chunk i's key. For callers that decode the payloads with
  // another decoder of this codec's format (the CUDA decoders of the Python package,
  // python/src/cuda/cuda_module.cc), which then verify the codec, artifact, model and content
  // checksum themselves.
  // Errors: InvalidArgument (chain, count), Corruption (unparsable header, a payload
  // bound to another key), Mismatch (a payload of another codec, model, artifact,
  // position or length, or an unbound one).
  Status CheckRestoreInputs(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
                            std::span<const std::vector<uint8_t>> payloads) const;

  // The dckv codec of a dckv PrefixCodec (its artifact, for a GPU decoder); null for
  // raw and spec.
  const dckv::DckvCodec* dckv_codec() const;
  // The spec artifact of a spec PrefixCodec (for a GPU decoder); null otherwise.
  const spec::SpecArtifact* spec_artifact() const;
  // spec only: the predictor's K/V of the tokens the first `n_payloads` chunks of the
  // chain of `tokens` cover, what RestoreKvChunks decodes against (slice chunk i with
  // spec::PredictedSlice(*out, layout(), i * chunk_tokens, ...)). Ok and nothing for
  // raw and dckv. Errors: the predictor's.
  Status PredictForRestore(std::span<const uint32_t> tokens, uint32_t n_payloads,
                           model::PredictorCache* out) const;

  // Tokens covered by the first `chunks` chunks of the chain of a `prefix_tokens`-token
  // prefix.
  uint64_t TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const;

  // The codecs, the model runtime and the predictor behind this class
  // (client/prefix_codec_impl.h).
  class Impl;

 private:
  explicit PrefixCodec(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
