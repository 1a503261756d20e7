#include "model/hybrid/hybrid_stored.h"

#include <algorithm>
#include <string>

#include "kvstash/payload_format.h"

namespace kvstash::hybrid {

Result<StoredBoundary> EncodeStoredBoundary(const HybridModel& model, const HybridState& state,
                                            uint32_t chunk_tokens) {
  const HybridConfig& c = model.config();
  if (chunk_tokens == 0 || chunk_tokens > kMaxChunkTokens) {
    return Status::InvalidArgument("hybrid store: chunk_tokens must be in 1.." +
                                   std::to_string(kMaxChunkTokens));
  }
  KVSTASH_RETURN_IF_ERROR(state.CheckShape(c));
  if (c.num_attention_layers() == 0) {
    return Status::InvalidArgument("hybrid store: the model has no attention layers");
  }
  StoredBoundary out;
  for (uint32_t begin = 0; begin < state.tokens; begin += chunk_tokens) {
    const uint32_t end = std::min(state.tokens, begin + chunk_tokens);
    KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, ExportKvChunk(c, state, begin, end));
    const PayloadHeader h = ChunkPayloadHeader(CodecId::kRaw, chunk.view(), begin, end - begin < chunk_tokens,
                                               model.fingerprint());
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, BuildPayload(h, chunk.data));
    out.kv_payloads.push_back(std::move(payload));
  }
  KVSTASH_ASSIGN_OR_RETURN(RecurrentState r, ExportRecurrentState(c, state));
  KVSTASH_ASSIGN_OR_RETURN(out.state_record, EncodeStateRecord(r, model.fingerprint()));
  return out;
}

Result<HybridState> RestoreStoredBoundary(const HybridModel& model,
                                          std::span<const std::vector<uint8_t>> kv_payloads,
                                          std::span<const uint8_t> state_record) {
  const HybridConfig& c = model.config();
  const KvLayout layout = HybridKvLayout(c);
  std::vector<KvChunk> chunks;
  uint64_t at = 0;
  for (size_t i = 0; i < kv_payloads.size(); ++i) {
    const std::string where = "hybrid restore: KV payload " + std::to_string(i);
    auto parsed = ParsePayload(kv_payloads[i]);
    if (!parsed.ok()) return parsed.status().WithContext(where);
    const PayloadHeader& h = parsed->header;
    if (h.codec != CodecId::kRaw) return Status::Mismatch(where + " is not codec raw");
    if (h.layout != layout) return Status::Mismatch(where + " has another KV layout");
    if (h.model_fingerprint != model.fingerprint()) {
      return Status::Mismatch(where + " is of another model");
    }
    if (h.token_offset != at) {
      return Status::Corruption(where + " starts at token " + std::to_string(h.token_offset) +
                                ", expected " + std::to_string(at));
    }
    KvChunk chunk;
    chunk.layout = layout;
    chunk.tokens = h.tokens;
    chunk.data.assign(parsed->body.begin(), parsed->body.end());
    if (!chunk.Validate().ok() || chunk.ContentChecksum() != h.content_checksum) {
      return Status::Corruption(where + ": body disagrees with the header's content checksum");
    }
    at += h.tokens;
    chunks.push_back(std::move(chunk));
  }
  auto record = DecodeStateRecord(state_record);
  if (!record.ok()) return record.status().WithContext("hybrid restore: state record");
  if (record->model_fingerprint != model.fingerprint()) {
    return Status::Mismatch("hybrid restore: the state record is of another model");
  }
  if (record->state.boundary_tokens != at) {
    return Status::Corruption("hybrid restore: the state record is at token " +
                              std::to_string(record->state.boundary_tokens) +
                              ", the KV payloads end at " + std::to_string(at));
  }
  return ImportState(c, chunks, record->state);
}

}  // namespace kvstash::hybrid
