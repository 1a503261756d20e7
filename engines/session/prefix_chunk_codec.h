// kvstash::session::PrefixChunkCodec: kvstash's PrefixCodec (raw, spec, dckv of an
// attention model's KV; kvstash/prefix_codec.h) as a session::ChunkCodec
// (chunk_codec.h), over the TokensOnly() chain. It stores no recurrent state.
// Thread-safety: as PrefixCodec (immutable, thread-safe).
#pragma once

#include <memory>

#include "engines/session/chunk_codec.h"
#include "kvstash/prefix_codec.h"

namespace kvstash::session {

class PrefixChunkCodec final : public ChunkCodec {
 public:
  // REQUIRES: codec is not null.
  explicit PrefixChunkCodec(std::shared_ptr<const PrefixCodec> codec) : codec_(std::move(codec)) {}

  // PrefixCodecName of the codec's kind.
  std::string name() const override;
  // dckv.
  bool lossy() const override;
  const KvLayout& layout() const override { return codec_->layout(); }
  Result<std::vector<ChunkKey>> ChainKeys(std::span<const uint32_t> tokens) const override;
  uint64_t TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const override;
  // PrefixCodec::EncodeKvChunks (states ignored).
  Result<std::vector<PutChunk>> Encode(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
                                       std::span<const KvChunk> chunks,
                                       std::span<const RecurrentState> states, uint32_t first_chunk,
                                       ChunkEncodeStats* stats) const override;
  // PrefixCodec::RestoreKvChunks (state_record and state ignored).
  Result<std::vector<KvChunk>> Restore(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
                                       std::span<const std::vector<uint8_t>> payloads,
                                       std::span<const uint8_t> state_record, RecurrentState* state,
                                       ChunkRestoreStats* stats) const override;

  const PrefixCodec& prefix_codec() const { return *codec_; }

 private:
  std::shared_ptr<const PrefixCodec> codec_;
};

}  // namespace kvstash::session
