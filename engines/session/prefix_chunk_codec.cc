#include "engines/session/prefix_chunk_codec.h"

namespace kvstash::session {

std::string PrefixChunkCodec::name() const { return PrefixCodecName(codec_->kind()); }

bool PrefixChunkCodec::lossy() const { return codec_->kind() == PrefixCodecKind::kDckv; }

Result<std::vector<ChunkKey>> PrefixChunkCodec::ChainKeys(std::span<const uint32_t> tokens) const {
  return codec_->ChainKeys(tokens, ChainInputs::TokensOnly());
}

uint64_t PrefixChunkCodec::TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const {
  return codec_->TokensOfChunks(prefix_tokens, chunks);
}

Result<std::vector<PutChunk>> PrefixChunkCodec::Encode(std::span<const uint32_t> tokens,
                                                       std::span<const ChunkKey> keys,
                                                       std::span<const KvChunk> chunks,
                                                       std::span<const RecurrentState>, uint32_t first_chunk,
                                                       ChunkEncodeStats* stats) const {
  PrefixEncodeStats es;
  KVSTASH_ASSIGN_OR_RETURN(std::vector<PutChunk> puts,
                           codec_->EncodeKvChunks(tokens, keys, chunks, first_chunk, &es));
  if (stats) {
    stats->raw_bytes += es.raw_bytes;
    stats->stored_bytes += es.stored_bytes;
  }
  return puts;
}

Result<std::vector<KvChunk>> PrefixChunkCodec::Restore(std::span<const uint32_t> tokens,
                                                       std::span<const ChunkKey> keys,
                                                       std::span<const std::vector<uint8_t>> payloads,
                                                       std::span<const uint8_t>, RecurrentState*,
                                                       ChunkRestoreStats* stats) const {
  PrefixRestoreStats rs;
  KVSTASH_ASSIGN_OR_RETURN(std::vector<KvChunk> chunks, codec_->RestoreKvChunks(tokens, keys, payloads, &rs));
  if (stats) stats->predictor_ms += rs.predictor_ms;
  return chunks;
}

}  // namespace kvstash::session
