// The engine session's codec over a HybridKvCoder (demo/demo_hybrid_codec.h): chain
// keys in the coder's namespace, payloads bound to their keys, a state record on the
// chunks StateAfterChunk names, restores through the coder's HybridState.
#include "demo/demo_hybrid_codec.h"

#include <algorithm>
#include <string>
#include <utility>

#include "kvstash/payload_format.h"
#include "kvstash/prefix_key.h"

namespace kvstash::demo {
namespace {

class HybridChunkCodec final : public session::ChunkCodec {
 public:
  HybridChunkCodec(const hybrid::HybridModel& model, std::unique_ptr<HybridKvCoder> coder,
                   const HybridChainOptions& options, const Digest256& ns)
      : model_(model),
        coder_(std::move(coder)),
        options_(options),
        layout_(hybrid::HybridKvLayout(model.config())),
        ns_(ns) {}

  std::string name() const override { return coder_->name(); }
  bool lossy() const override { return coder_->lossy(); }
  const KvLayout& layout() const override { return layout_; }

  Result<std::vector<ChunkKey>> ChainKeys(std::span<const uint32_t> tokens) const override {
    if (tokens.empty()) return Status::InvalidArgument("hybrid codec: empty prefix");
    return ComputeChunkKeys(ns_, tokens, options_.chunk_tokens, /*include_partial=*/true);
  }

  uint64_t TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const override {
    return std::min<uint64_t>(prefix_tokens, uint64_t{chunks} * options_.chunk_tokens);
  }

  bool stores_state() const override { return true; }

  bool StateAfterChunk(uint32_t chunk, uint32_t chunks) const override {
    return (chunk + 1) % std::max<uint32_t>(options_.state_every, 1) == 0 || chunk + 1 == chunks;
  }

  Result<std::vector<PutChunk>> Encode(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
                                       std::span<const KvChunk> chunks,
                                       std::span<const RecurrentState> states, uint32_t first_chunk,
                                       session::ChunkEncodeStats* stats) const override {
    const uint32_t n = static_cast<uint32_t>(keys.size());
    if (first_chunk > n || chunks.size() != n - first_chunk || states.size() != chunks.size()) {
      return Status::InvalidArgument("hybrid codec: the chunks and states do not cover the chain's rest");
    }
    std::vector<PutChunk> puts;
    uint32_t begin = 0;
    for (uint32_t c = 0; c < n; ++c) {
      if (c >= first_chunk) {
        KVSTASH_ASSIGN_OR_RETURN(PutChunk p, EncodeOne(tokens, keys, c, begin, chunks[c - first_chunk],
                                                       states[c - first_chunk], stats));
        puts.push_back(std::move(p));
      }
      begin += keys[c].tokens;
    }
    return puts;
  }

  Result<std::vector<KvChunk>> Restore(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
                                       std::span<const std::vector<uint8_t>> payloads,
                                       std::span<const uint8_t> state_record, RecurrentState* state,
                                       session::ChunkRestoreStats* stats) const override {
    if (payloads.empty() || payloads.size() > keys.size()) {
      return Status::InvalidArgument("hybrid codec: payload count");
    }
    // Each payload must be the one stored under the key it was read for.
    for (size_t c = 0; c < payloads.size(); ++c) {
      KVSTASH_RETURN_IF_ERROR(CheckPayloadKey(payloads[c], keys[c].stored()));
    }
    double predictor_ms = 0;
    KVSTASH_ASSIGN_OR_RETURN(hybrid::HybridState s,
                             coder_->Restore(tokens, payloads, state_record, &predictor_ms));
    if (stats) stats->predictor_ms += predictor_ms;
    std::vector<KvChunk> out;
    uint32_t begin = 0;
    for (size_t c = 0; c < payloads.size(); ++c) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk,
                               hybrid::ExportKvChunk(model_.config(), s, begin, begin + keys[c].tokens));
      out.push_back(std::move(chunk));
      begin += keys[c].tokens;
    }
    KVSTASH_ASSIGN_OR_RETURN(*state, hybrid::ExportRecurrentState(model_.config(), s));
    return out;
  }

 private:
  // The PUT of chain chunk c (tokens [begin, begin + exact.tokens)), with its state
  // record when StateAfterChunk names it.
  Result<PutChunk> EncodeOne(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys, uint32_t c,
                             uint32_t begin, const KvChunk& exact, const RecurrentState& state,
                             session::ChunkEncodeStats* stats) const {
    PutChunk p;
    p.route = keys[0].stored();
    p.key = keys[c].stored();
    if (c > 0) p.parent = keys[c - 1].stored();
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> unbound,
                             coder_->EncodeChunk(tokens, exact, begin, keys[c].partial));
    KVSTASH_ASSIGN_OR_RETURN(p.payload, BindPayloadToKey(unbound, p.key));
    session::ChunkEncodeStats es;
    es.raw_bytes = exact.data.size();
    es.stored_bytes = p.payload.size();
    if (StateAfterChunk(c, static_cast<uint32_t>(keys.size()))) {
      if (state.boundary_tokens != begin + exact.tokens) {
        return Status::InvalidArgument("hybrid codec: chunk " + std::to_string(c) +
                                       " has no state at its end");
      }
      KVSTASH_ASSIGN_OR_RETURN(p.state_record, coder_->EncodeState(tokens, state));
      es.states = 1;
      es.state_raw_bytes = state.DataBytes();
      es.state_stored_bytes = p.state_record.size();
    }
    if (stats) {
      stats->raw_bytes += es.raw_bytes + es.state_raw_bytes;
      stats->stored_bytes += es.stored_bytes + es.state_stored_bytes;
      stats->states += es.states;
      stats->state_raw_bytes += es.state_raw_bytes;
      stats->state_stored_bytes += es.state_stored_bytes;
    }
    return p;
  }

  const hybrid::HybridModel& model_;
  std::unique_ptr<HybridKvCoder> coder_;
  HybridChainOptions options_;
  KvLayout layout_;
  Digest256 ns_;
};

}  // namespace

Result<std::shared_ptr<const session::ChunkCodec>> MakeHybridChunkCodec(const hybrid::HybridModel& model,
                                                                        std::unique_ptr<HybridKvCoder> coder,
                                                                        const HybridChainOptions& options) {
  if (options.chunk_tokens == 0 || options.chunk_tokens > kMaxChunkTokens) {
    return Status::InvalidArgument("hybrid codec: chunk_tokens must be in 1.." +
                                   std::to_string(kMaxChunkTokens));
  }
  Namespace ns;
  ns.model_fingerprint.assign(model.fingerprint().begin(), model.fingerprint().end());
  ns.layout = hybrid::HybridKvLayout(model.config());
  ns.chunk_tokens = options.chunk_tokens;
  ns.codec_id = coder->codec_id();
  ns.codec_artifact_digest = coder->artifact_digest();
  ns.cache_salt = options.cache_salt;
  ns.tenant = options.tenant;
  KVSTASH_ASSIGN_OR_RETURN(const Digest256 digest, NamespaceDigest(ns));
  return std::shared_ptr<const session::ChunkCodec>(
      std::make_shared<HybridChunkCodec>(model, std::move(coder), options, digest));
}

}  // namespace kvstash::demo
