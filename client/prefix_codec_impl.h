// PrefixCodec::Impl: what stands behind kvstash::PrefixCodec (private to client/; the
// contract, errors and thread-safety are those of include/kvstash/prefix_codec.h, whose
// methods forward here one to one). It holds the namespace (options, layout, digests)
// and, per codec kind, the model runtime (for the fp32 KvCache forms), the spec
// predictor and artifact, or the dckv codec; prefix_codec_impl.cc codes and verifies
// the chunks, prefix_codec.cc validates and builds one (the factories).
// Thread-safety: immutable once built; every const method may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codec/dckv/dckv_codec.h"
#include "codec/spec/spec_artifact.h"
#include "kvstash/prefix_codec.h"
#include "model/forward/kv_cache.h"
#include "model/forward/model.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash {

class PrefixCodec::Impl {
 public:
  // `model` may be null (a raw codec of an engine's layout); `layout`'s dtype is
  // replaced by options.kv_dtype. The factories set the codec parts, then Init().
  Impl(const model::Model* model, const KvLayout& layout, PrefixCodecOptions options);
  // Checks kv_dtype and computes the namespace digest (InvalidArgument on a bad dtype).
  Status Init();

  Result<std::vector<ChunkKey>> ChainKeys(std::span<const uint32_t> tokens,
                                          const ChainInputs& inputs) const;
  Result<std::vector<PutChunk>> EncodeChunks(std::span<const uint32_t> tokens,
                                             const model::KvCache& exact, uint32_t first_chunk,
                                             PrefixEncodeStats* stats) const;
  Result<RestoredPrefix> Restore(std::span<const uint32_t> tokens,
                                 std::span<const std::vector<uint8_t>> payloads,
                                 PrefixRestoreStats* stats) const;
  Result<std::vector<PutChunk>> EncodeKvChunks(std::span<const uint32_t> tokens,
                                               std::span<const ChunkKey> keys,
                                               std::span<const KvChunk> chunks,
                                               uint32_t first_chunk,
                                               PrefixEncodeStats* stats) const;
  Result<std::vector<KvChunk>> RestoreKvChunks(std::span<const uint32_t> tokens,
                                               std::span<const ChunkKey> keys,
                                               std::span<const std::span<const uint8_t>> payloads,
                                               PrefixRestoreStats* stats) const;
  Result<std::vector<KvChunkView>> ViewRawKvChunks(std::span<const uint32_t> tokens,
                                                   std::span<const ChunkKey> keys,
                                                   std::span<const std::span<const uint8_t>> payloads,
                                                   uint32_t first_chunk) const;
  Status CheckRestoreInputs(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
                            std::span<const std::vector<uint8_t>> payloads) const;
  Status PredictForRestore(std::span<const uint32_t> tokens, uint32_t n_payloads,
                           model::PredictorCache* out) const;
  uint64_t TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const;

  const PrefixCodecOptions& options() const { return options_; }
  const KvLayout& layout() const { return layout_; }
  const Digest256& namespace_digest() const { return namespace_; }
  const Digest256& artifact_digest() const { return artifact_digest_; }
  const dckv::DckvCodec* dckv_codec() const { return dckv_.get(); }
  const spec::SpecArtifact* spec_artifact() const { return spec_artifact_.get(); }

 private:
  friend class PrefixCodec;  // its factories set the codec parts

  // InvalidArgument unless keys are the chain of a tokens.size()-token prefix.
  Status CheckChain(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys) const;
  // The predictor's K/V of the first `n` tokens (spec only; nothing otherwise).
  Status Predict(std::span<const uint32_t> tokens, model::PredictorCache* out,
                 double* ms) const;
  // chunk_tokens: the chunk's token ids (dckv's token-conditioned models carry them).
  // The payload comes back bound to `key`.
  Result<std::vector<uint8_t>> EncodeOne(const KvChunk& chunk, const StoredKey& key,
                                         std::span<const uint32_t> chunk_tokens,
                                         uint32_t token_offset, uint32_t prefix_tokens,
                                         const model::PredictorCache* prediction) const;
  Result<KvChunk> DecodeOne(std::span<const uint8_t> payload, const StoredKey& key,
                            uint32_t token_offset, uint32_t tokens,
                            const model::PredictorCache* prediction) const;
  // Mismatch unless the payload's header is of this codec, model and artifact and covers
  // [token_offset, token_offset + tokens); then CheckPayloadKey's errors unless it is
  // bound to `key` (Corruption: another chunk's payload; Mismatch: unbound).
  Status CheckHeader(std::span<const uint8_t> payload, const StoredKey& key,
                     uint32_t token_offset, uint32_t tokens) const;

  const model::Model* model_;  // null for CreateRaw(layout, ...)
  PrefixCodecOptions options_;
  KvLayout layout_;
  Digest256 namespace_{};
  Digest256 artifact_digest_{};
  std::shared_ptr<const model::SpecPredictor> predictor_;  // spec only
  std::shared_ptr<const spec::SpecArtifact> spec_artifact_;  // spec only
  std::shared_ptr<const dckv::DckvCodec> dckv_;              // dckv only
};

}  // namespace kvstash
