// The coding behind kvstash::PrefixCodec (prefix_codec_impl.h): chain keys and checks,
// per-chunk encode and decode with the raw, spec or dckv codec, the runtime's fp32 forms.
#include "client/prefix_codec_impl.h"

#include <algorithm>
#include <chrono>

#include "codec/spec/spec_codec.h"
#include "kvstash/payload_format.h"
#include "model/forward/kv_export.h"

namespace kvstash {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

Result<std::vector<uint8_t>> EncodeRaw(const KvChunk& chunk, const StoredKey& key,
                                       uint32_t token_offset, bool partial,
                                       const Digest256& fingerprint) {
  PayloadHeader h = ChunkPayloadHeader(CodecId::kRaw, chunk.view(), token_offset, partial, fingerprint);
  h.chunk_key = key;
  return BuildPayload(h, chunk.data);
}

// The verified chunk of a raw payload, viewing its body (a raw body is the chunk).
Result<KvChunkView> VerifyRaw(std::span<const uint8_t> payload, const KvLayout& layout,
                              const Digest256& fingerprint) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadView v, ParsePayload(payload));
  if (v.header.codec != CodecId::kRaw) return Status::Mismatch("payload is not of codec raw");
  if (v.header.model_fingerprint != fingerprint) return Status::Mismatch("payload of another model");
  if (!(v.header.layout == layout)) return Status::Mismatch("payload of another KV layout");
  const KvChunkView c{layout, v.header.tokens, v.body, {}};
  if (v.body.size() != layout.DataBytes(c.tokens)) return Status::Corruption("raw payload body size");
  if (c.ContentChecksum() != v.header.content_checksum) {
    return Status::Corruption("raw payload content checksum mismatch");
  }
  return c;
}

Result<KvChunk> DecodeRaw(std::span<const uint8_t> payload, const KvLayout& layout,
                          const Digest256& fingerprint) {
  KVSTASH_ASSIGN_OR_RETURN(KvChunkView v, VerifyRaw(payload, layout, fingerprint));
  KvChunk c;
  c.layout = v.layout;
  c.tokens = v.tokens;
  c.data.assign(v.data.begin(), v.data.end());
  return c;
}

std::vector<std::span<const uint8_t>> Spans(std::span<const std::vector<uint8_t>> payloads) {
  return {payloads.begin(), payloads.end()};
}

}  // namespace

PrefixCodec::Impl::Impl(const model::Model* model, const KvLayout& layout,
                         PrefixCodecOptions options)
    : model_(model), options_(std::move(options)), layout_(layout) {
  layout_.dtype = options_.kv_dtype;
}

Status PrefixCodec::Impl::Init() {
  if (options_.kv_dtype != DType::kBF16 && options_.kv_dtype != DType::kF16) {
    return Status::InvalidArgument("PrefixCodec: kv_dtype must be bf16 or f16, not " +
                                   std::string(DTypeName(options_.kv_dtype)));
  }
  Namespace ns;
  ns.model_fingerprint = ToHex(options_.model_fingerprint);
  ns.layout = layout_;
  ns.chunk_tokens = options_.chunk_tokens;
  ns.tp_rank = options_.tp_rank;
  ns.tp_size = options_.tp_size;
  ns.adapter_name = options_.adapter_name;
  ns.adapter_id = options_.adapter_id;
  ns.adapter_digest = options_.adapter_digest;
  ns.tenant = options_.tenant;
  ns.cache_salt = options_.cache_salt;
  ns.codec_id = PrefixCodecName(options_.kind);
  if (options_.kind != PrefixCodecKind::kRaw) ns.codec_artifact_digest = ToHex(artifact_digest_);
  KVSTASH_ASSIGN_OR_RETURN(namespace_, NamespaceDigest(ns));
  return Status::Ok();
}

Result<std::vector<ChunkKey>> PrefixCodec::Impl::ChainKeys(std::span<const uint32_t> tokens,
                                                           const ChainInputs& inputs) const {
  if (tokens.empty()) return Status::InvalidArgument("empty prefix");
  if (!inputs.tokens_only()) {
    const uint64_t C = options_.chunk_tokens;
    const uint64_t chunks = (tokens.size() + C - 1) / C;
    if (inputs.extra_keys().size() != chunks) {
      return Status::InvalidArgument("ChainKeys: " + std::to_string(inputs.extra_keys().size()) +
                                     " lists of extra keys for a chain of " +
                                     std::to_string(chunks) + " chunks");
    }
  }
  return ComputeChunkKeys(namespace_, tokens, options_.chunk_tokens, /*include_partial=*/true,
                          inputs.extra_keys());
}

uint64_t PrefixCodec::Impl::TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const {
  return std::min<uint64_t>(prefix_tokens, static_cast<uint64_t>(chunks) * options_.chunk_tokens);
}

Status PrefixCodec::Impl::CheckChain(std::span<const uint32_t> tokens,
                                     std::span<const ChunkKey> keys) const {
  if (tokens.empty()) return Status::InvalidArgument("empty prefix");
  const uint64_t C = options_.chunk_tokens;
  if (keys.size() != (tokens.size() + C - 1) / C) {
    return Status::InvalidArgument("keys are not the chain of a " + std::to_string(tokens.size()) +
                                   "-token prefix (" + std::to_string(keys.size()) + " keys)");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t want = std::min<uint64_t>(C, tokens.size() - i * C);
    if (keys[i].tokens != want || keys[i].partial != (want < C)) {
      return Status::InvalidArgument("key " + std::to_string(i) + " does not cover chunk " +
                                     std::to_string(i) + " of the prefix");
    }
  }
  return Status::Ok();
}

Status PrefixCodec::Impl::Predict(std::span<const uint32_t> tokens, model::PredictorCache* out,
                                  double* ms) const {
  if (options_.kind != PrefixCodecKind::kSpec) return Status::Ok();
  const auto t0 = Clock::now();
  KVSTASH_RETURN_IF_ERROR(predictor_->Run(tokens, out));
  *ms = Ms(t0, Clock::now());
  return Status::Ok();
}

Result<std::vector<uint8_t>> PrefixCodec::Impl::EncodeOne(const KvChunk& chunk, const StoredKey& key,
                                                          std::span<const uint32_t> chunk_tokens,
                                                          uint32_t token_offset, uint32_t prefix_tokens,
                                                          const model::PredictorCache* prediction) const {
  const bool partial = chunk.tokens < options_.chunk_tokens;
  Result<std::vector<uint8_t>> unbound = Status::Internal("unknown codec kind");
  switch (options_.kind) {
    case PrefixCodecKind::kRaw:
      return EncodeRaw(chunk, key, token_offset, partial, options_.model_fingerprint);
    case PrefixCodecKind::kSpec:
      unbound = spec::EncodeSpecPayload(
          *spec_artifact_, artifact_digest_, chunk.view(),
          spec::PredictedSlice(*prediction, layout_, token_offset, token_offset + chunk.tokens),
          options_.model_fingerprint, token_offset, predictor_->options().threads);
      break;
    case PrefixCodecKind::kDckv:
      unbound = dckv_->Encode(chunk.view(), chunk_tokens, token_offset, prefix_tokens,
                              options_.model_fingerprint);
      break;
  }
  if (!unbound.ok()) return unbound.status();
  return BindPayloadToKey(*unbound, key);
}

Result<std::vector<PutChunk>> PrefixCodec::Impl::EncodeKvChunks(std::span<const uint32_t> tokens,
                                                                std::span<const ChunkKey> keys,
                                                                std::span<const KvChunk> chunks,
                                                                uint32_t first_chunk,
                                                                PrefixEncodeStats* stats) const {
  KVSTASH_RETURN_IF_ERROR(CheckChain(tokens, keys));
  if (first_chunk > keys.size()) return Status::InvalidArgument("EncodeKvChunks: first_chunk beyond the chain");
  if (chunks.size() != keys.size() - first_chunk) {
    return Status::InvalidArgument("EncodeKvChunks: " + std::to_string(chunks.size()) +
                                   " chunks for chain chunks [" + std::to_string(first_chunk) + ", " +
                                   std::to_string(keys.size()) + ")");
  }
  PrefixEncodeStats local;
  std::vector<PutChunk> out;
  if (chunks.empty()) {
    if (stats) *stats = local;
    return out;
  }
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  model::PredictorCache prediction;
  KVSTASH_RETURN_IF_ERROR(Predict(tokens, &prediction, &local.predictor_ms));
  const auto t0 = Clock::now();
  const uint32_t C = options_.chunk_tokens;
  for (uint32_t i = first_chunk; i < keys.size(); ++i) {
    const KvChunk& chunk = chunks[i - first_chunk];
    KVSTASH_RETURN_IF_ERROR(chunk.Validate());
    if (!(chunk.layout == layout_) || chunk.tokens != keys[i].tokens) {
      return Status::InvalidArgument("EncodeKvChunks: chunk " + std::to_string(i) +
                                     " is not a " + std::to_string(keys[i].tokens) +
                                     "-token chunk of the codec's layout");
    }
    const uint32_t b = i * C;
    PutChunk p;
    p.route = keys[0].stored();
    p.key = keys[i].stored();
    if (i > 0) p.parent = keys[i - 1].stored();
    KVSTASH_ASSIGN_OR_RETURN(p.payload, EncodeOne(chunk, p.key, tokens.subspan(b, chunk.tokens), b,
                                                  n, &prediction));
    local.raw_bytes += chunk.data.size();
    local.stored_bytes += p.payload.size();
    out.push_back(std::move(p));
  }
  local.encode_ms = Ms(t0, Clock::now());
  if (stats) *stats = local;
  return out;
}

Result<std::vector<PutChunk>> PrefixCodec::Impl::EncodeChunks(std::span<const uint32_t> tokens,
                                                              const model::KvCache& exact,
                                                              uint32_t first_chunk,
                                                              PrefixEncodeStats* stats) const {
  if (model_ == nullptr) return Status::InvalidArgument("EncodeChunks: this codec has no model (use EncodeKvChunks)");
  KVSTASH_ASSIGN_OR_RETURN(auto keys, ChainKeys(tokens, ChainInputs::TokensOnly()));
  KVSTASH_RETURN_IF_ERROR(exact.CheckFor(model_->config));
  if (exact.tokens < tokens.size()) {
    return Status::InvalidArgument("EncodeChunks: the cache is shorter than the prefix");
  }
  if (first_chunk > keys.size()) return Status::InvalidArgument("EncodeChunks: first_chunk beyond the chain");
  const auto t0 = Clock::now();
  std::vector<KvChunk> chunks;
  const uint32_t C = options_.chunk_tokens;
  for (uint32_t i = first_chunk; i < keys.size(); ++i) {
    KVSTASH_ASSIGN_OR_RETURN(KvChunk c, model::ToKvChunk(exact, i * C, i * C + keys[i].tokens, layout_.dtype));
    chunks.push_back(std::move(c));
  }
  const double convert_ms = Ms(t0, Clock::now());
  PrefixEncodeStats local;
  KVSTASH_ASSIGN_OR_RETURN(auto out, EncodeKvChunks(tokens, keys, chunks, first_chunk, &local));
  local.encode_ms += convert_ms;
  if (stats) *stats = local;
  return out;
}

Status PrefixCodec::Impl::CheckHeader(std::span<const uint8_t> payload, const StoredKey& key,
                                      uint32_t token_offset, uint32_t tokens) const {
  KVSTASH_ASSIGN_OR_RETURN(PayloadHeader h, ParsePayloadHeader(payload));
  // What tells a payload of another namespace configuration first (Mismatch: another
  // codec, artifact, model or layout), then its place in the chain, then its key: a payload of
  // this configuration and position bound to another key is another chunk's KV.
  static constexpr CodecId kCodecOf[] = {CodecId::kRaw, CodecId::kSpec, CodecId::kDckv};
  if (h.codec != kCodecOf[static_cast<int>(options_.kind)]) {
    return Status::Mismatch("payload is of codec " + std::to_string(static_cast<int>(h.codec)) +
                            ", not " + PrefixCodecName(options_.kind));
  }
  if (h.model_fingerprint != options_.model_fingerprint) {
    return Status::Mismatch("payload of another model");
  }
  if (options_.kind != PrefixCodecKind::kRaw && h.artifact_digest != artifact_digest_) {
    return Status::Mismatch("payload was coded with another artifact");
  }
  if (!(h.layout == layout_)) return Status::Mismatch("payload of another KV layout or dtype");
  if (h.tokens != tokens || h.token_offset != token_offset) {
    return Status::Mismatch("payload covers tokens [" + std::to_string(h.token_offset) + ", +" +
                            std::to_string(h.tokens) + "), the chain's chunk is [" +
                            std::to_string(token_offset) + ", +" + std::to_string(tokens) + ")");
  }
  return CheckPayloadKey(h, key);
}

Status PrefixCodec::Impl::CheckRestoreInputs(std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
                                             std::span<const std::vector<uint8_t>> payloads) const {
  if (payloads.empty()) return Status::InvalidArgument("Restore: no payloads");
  KVSTASH_RETURN_IF_ERROR(CheckChain(tokens, keys));
  if (payloads.size() > keys.size()) return Status::InvalidArgument("Restore: more payloads than chunks");
  for (uint32_t i = 0; i < payloads.size(); ++i) {
    KVSTASH_RETURN_IF_ERROR(
        CheckHeader(payloads[i], keys[i].stored(), i * options_.chunk_tokens, keys[i].tokens));
  }
  return Status::Ok();
}

Status PrefixCodec::Impl::PredictForRestore(std::span<const uint32_t> tokens, uint32_t n_payloads,
                                            model::PredictorCache* out) const {
  const uint64_t covered = std::min<uint64_t>(TokensOfChunks(tokens.size(), n_payloads), tokens.size());
  double ms = 0;
  return Predict(tokens.first(covered), out, &ms);
}

Result<KvChunk> PrefixCodec::Impl::DecodeOne(std::span<const uint8_t> payload, const StoredKey& key,
                                             uint32_t token_offset, uint32_t tokens,
                                             const model::PredictorCache* prediction) const {
  // The header must be bound to this chunk's key and describe this chunk of this chain
  // before any decoder trusts it.
  KVSTASH_RETURN_IF_ERROR(CheckHeader(payload, key, token_offset, tokens));
  switch (options_.kind) {
    case PrefixCodecKind::kRaw:
      return DecodeRaw(payload, layout_, options_.model_fingerprint);
    case PrefixCodecKind::kSpec:
      return spec::DecodeSpecPayload(*spec_artifact_, artifact_digest_, payload,
                                     spec::PredictedSlice(*prediction, layout_, token_offset, token_offset + tokens),
                                     options_.model_fingerprint, predictor_->options().threads);
    case PrefixCodecKind::kDckv:
      return dckv_->Decode(payload, options_.model_fingerprint);
  }
  return Status::Internal("unknown codec kind");
}

Result<std::vector<KvChunkView>> PrefixCodec::Impl::ViewRawKvChunks(
    std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
    std::span<const std::span<const uint8_t>> payloads, uint32_t first_chunk) const {
  if (options_.kind != PrefixCodecKind::kRaw) {
    return Status::InvalidArgument("ViewRawKvChunks: a " + std::string(PrefixCodecName(options_.kind)) +
                                   " codec's payloads are coded (use RestoreKvChunks)");
  }
  if (payloads.empty()) return Status::InvalidArgument("Restore: no payloads");
  KVSTASH_RETURN_IF_ERROR(CheckChain(tokens, keys));
  if (first_chunk > keys.size() || payloads.size() > keys.size() - first_chunk) {
    return Status::InvalidArgument("Restore: more payloads than chunks");
  }
  std::vector<KvChunkView> out;
  for (uint32_t j = 0; j < payloads.size(); ++j) {
    // As DecodeOne: the header is bound to this chunk's key and position first.
    const uint32_t i = first_chunk + j;
    KVSTASH_RETURN_IF_ERROR(
        CheckHeader(payloads[j], keys[i].stored(), i * options_.chunk_tokens, keys[i].tokens));
    KVSTASH_ASSIGN_OR_RETURN(KvChunkView c, VerifyRaw(payloads[j], layout_, options_.model_fingerprint));
    if (c.tokens != keys[i].tokens) return Status::Mismatch("decoded chunk has another shape than the chain's chunk");
    out.push_back(c);
  }
  return out;
}

Result<std::vector<KvChunk>> PrefixCodec::Impl::RestoreKvChunks(
    std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
    std::span<const std::span<const uint8_t>> payloads, PrefixRestoreStats* stats) const {
  if (payloads.empty()) return Status::InvalidArgument("Restore: no payloads");
  KVSTASH_RETURN_IF_ERROR(CheckChain(tokens, keys));
  if (payloads.size() > keys.size()) return Status::InvalidArgument("Restore: more payloads than chunks");
  const uint32_t C = options_.chunk_tokens;
  const uint32_t covered = static_cast<uint32_t>(TokensOfChunks(tokens.size(), static_cast<uint32_t>(payloads.size())));
  PrefixRestoreStats local;
  model::PredictorCache prediction;
  KVSTASH_RETURN_IF_ERROR(Predict(tokens.first(covered), &prediction, &local.predictor_ms));
  std::vector<KvChunk> out;
  const auto t0 = Clock::now();
  for (uint32_t i = 0; i < payloads.size(); ++i) {
    KVSTASH_ASSIGN_OR_RETURN(KvChunk c, DecodeOne(payloads[i], keys[i].stored(), i * C, keys[i].tokens,
                                                       &prediction));
    if (!(c.layout == layout_) || c.tokens != keys[i].tokens) {
      return Status::Mismatch("decoded chunk has another shape than the chain's chunk");
    }
    out.push_back(std::move(c));
  }
  local.decode_ms = Ms(t0, Clock::now());
  if (stats) *stats = local;
  return out;
}

Result<RestoredPrefix> PrefixCodec::Impl::Restore(std::span<const uint32_t> tokens,
                                                  std::span<const std::vector<uint8_t>> payloads,
                                                  PrefixRestoreStats* stats) const {
  if (model_ == nullptr) return Status::InvalidArgument("Restore: this codec has no model (use RestoreKvChunks)");
  if (payloads.empty()) return Status::InvalidArgument("Restore: no payloads");
  KVSTASH_ASSIGN_OR_RETURN(auto keys, ChainKeys(tokens, ChainInputs::TokensOnly()));
  PrefixRestoreStats local;
  RestoredPrefix out;
  KVSTASH_ASSIGN_OR_RETURN(out.chunks, RestoreKvChunks(tokens, keys, Spans(payloads), &local));
  const auto t0 = Clock::now();
  out.cache = std::make_unique<model::KvCache>(model::KvCache::ForModel(model_->config));
  for (const KvChunk& c : out.chunks) {
    KVSTASH_ASSIGN_OR_RETURN(model::KvCache part, model::FromKvChunk(c.view()));
    KVSTASH_RETURN_IF_ERROR(model::AppendKv(part, out.cache.get()));
  }
  local.assemble_ms = Ms(t0, Clock::now());
  if (stats) *stats = local;
  return out;
}

}  // namespace kvstash
