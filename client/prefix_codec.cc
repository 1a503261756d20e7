// The public surface of kvstash::PrefixCodec (include/kvstash/prefix_codec.h): codec
// names, the factories that validate and build a PrefixCodec::Impl
// (prefix_codec_impl.h), and the methods that forward to it.
#include "kvstash/prefix_codec.h"

#include <utility>

#include "client/prefix_codec_impl.h"

namespace kvstash {

const char* PrefixCodecName(PrefixCodecKind kind) {
  switch (kind) {
    case PrefixCodecKind::kRaw: return "raw";
    case PrefixCodecKind::kSpec: return "spec";
    case PrefixCodecKind::kDckv: return "dckv";
  }
  return "?";
}

Result<PrefixCodecKind> ParsePrefixCodecKind(const std::string& name) {
  if (name == "raw") return PrefixCodecKind::kRaw;
  if (name == "spec") return PrefixCodecKind::kSpec;
  if (name == "dckv") return PrefixCodecKind::kDckv;
  return Status::InvalidArgument("unknown codec '" + name + "' (raw, spec or dckv)");
}

namespace {
KvLayout ModelLayout(const model::Model& model) {
  return {model.config.n_layers, model.config.n_kv_heads, model.config.head_dim, DType::kBF16};
}
}  // namespace

std::vector<ChunkRef> PrefixCodec::LookupChain(std::span<const ChunkKey> keys) {
  std::vector<ChunkRef> chain;
  chain.reserve(keys.size());
  for (const ChunkKey& k : keys) chain.push_back({k.stored(), k.tokens});
  return chain;
}

Result<std::unique_ptr<PrefixCodec>> PrefixCodec::CreateRaw(const model::Model& model,
                                                            const PrefixCodecOptions& options) {
  if (options.kind != PrefixCodecKind::kRaw) return Status::InvalidArgument("CreateRaw: options.kind is not raw");
  auto c = std::make_unique<PrefixCodec::Impl>(&model, ModelLayout(model), options);
  KVSTASH_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<PrefixCodec>(new PrefixCodec(std::move(c)));
}

Result<std::unique_ptr<PrefixCodec>> PrefixCodec::CreateRaw(const KvLayout& layout,
                                                            const PrefixCodecOptions& options) {
  if (options.kind != PrefixCodecKind::kRaw) return Status::InvalidArgument("CreateRaw: options.kind is not raw");
  auto c = std::make_unique<PrefixCodec::Impl>(nullptr, layout, options);
  KVSTASH_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<PrefixCodec>(new PrefixCodec(std::move(c)));
}

Result<std::unique_ptr<PrefixCodec>> PrefixCodec::CreateSpec(
    const model::Model& model, std::shared_ptr<const model::SpecPredictor> predictor,
    spec::SpecArtifact artifact, const PrefixCodecOptions& options) {
  return CreateSpec(model, std::move(predictor),
                    std::make_shared<const spec::SpecArtifact>(std::move(artifact)), options);
}

Result<std::unique_ptr<PrefixCodec>> PrefixCodec::CreateSpec(
    const model::Model& model, std::shared_ptr<const model::SpecPredictor> predictor,
    std::shared_ptr<const spec::SpecArtifact> artifact, const PrefixCodecOptions& options) {
  if (options.kind != PrefixCodecKind::kSpec) return Status::InvalidArgument("CreateSpec: options.kind is not spec");
  if (predictor == nullptr) return Status::InvalidArgument("CreateSpec: no predictor");
  if (artifact == nullptr) return Status::InvalidArgument("CreateSpec: no artifact");
  auto c = std::make_unique<PrefixCodec::Impl>(&model, ModelLayout(model), options);
  if (!(artifact->layout == c->layout_)) {
    return Status::InvalidArgument("CreateSpec: the artifact's layout is not the model's layout in " +
                                   std::string(DTypeName(options.kv_dtype)));
  }
  if (artifact->predictor_digest != predictor->Digest()) {
    return Status::Mismatch("CreateSpec: the artifact was calibrated with another predictor");
  }
  c->artifact_digest_ = artifact->Digest();
  c->predictor_ = std::move(predictor);
  c->spec_artifact_ = std::move(artifact);
  KVSTASH_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<PrefixCodec>(new PrefixCodec(std::move(c)));
}

Result<std::unique_ptr<PrefixCodec>> PrefixCodec::CreateDckv(const model::Model& model,
                                                             dckv::DckvArtifact artifact,
                                                             const PrefixCodecOptions& options) {
  if (options.kind != PrefixCodecKind::kDckv) return Status::InvalidArgument("CreateDckv: options.kind is not dckv");
  KVSTASH_ASSIGN_OR_RETURN(dckv::DckvCodec codec, dckv::DckvCodec::Create(std::move(artifact)));
  return CreateDckv(model, std::make_shared<const dckv::DckvCodec>(std::move(codec)), options);
}

Result<std::unique_ptr<PrefixCodec>> PrefixCodec::CreateDckv(const model::Model& model,
                                                             std::shared_ptr<const dckv::DckvCodec> codec,
                                                             const PrefixCodecOptions& options) {
  if (options.kind != PrefixCodecKind::kDckv) return Status::InvalidArgument("CreateDckv: options.kind is not dckv");
  if (codec == nullptr) return Status::InvalidArgument("CreateDckv: no codec");
  auto c = std::make_unique<PrefixCodec::Impl>(&model, ModelLayout(model), options);
  if (!(codec->OutputLayout(options.kv_dtype) == c->layout_)) {
    return Status::InvalidArgument("CreateDckv: the artifact's shape is not the model's, or its "
                                   "output dtype is not " + std::string(DTypeName(options.kv_dtype)));
  }
  c->artifact_digest_ = codec->digest();
  c->dckv_ = std::move(codec);
  KVSTASH_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<PrefixCodec>(new PrefixCodec(std::move(c)));
}

RestoredPrefix::RestoredPrefix() = default;
RestoredPrefix::RestoredPrefix(RestoredPrefix&&) noexcept = default;
RestoredPrefix& RestoredPrefix::operator=(RestoredPrefix&&) noexcept = default;
RestoredPrefix::~RestoredPrefix() = default;

PrefixCodec::PrefixCodec(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PrefixCodec::~PrefixCodec() = default;

PrefixCodecKind PrefixCodec::kind() const { return impl_->options().kind; }
const PrefixCodecOptions& PrefixCodec::options() const { return impl_->options(); }
const KvLayout& PrefixCodec::layout() const { return impl_->layout(); }
const Digest256& PrefixCodec::namespace_digest() const { return impl_->namespace_digest(); }
const Digest256& PrefixCodec::artifact_digest() const { return impl_->artifact_digest(); }
const dckv::DckvCodec* PrefixCodec::dckv_codec() const { return impl_->dckv_codec(); }
const spec::SpecArtifact* PrefixCodec::spec_artifact() const { return impl_->spec_artifact(); }

Result<std::vector<ChunkKey>> PrefixCodec::ChainKeys(std::span<const uint32_t> tokens,
                                                     const ChainInputs& inputs) const {
  return impl_->ChainKeys(tokens, inputs);
}

uint64_t PrefixCodec::TokensOfChunks(uint64_t prefix_tokens, uint32_t chunks) const {
  return impl_->TokensOfChunks(prefix_tokens, chunks);
}

Result<std::vector<PutChunk>> PrefixCodec::EncodeChunks(std::span<const uint32_t> tokens,
                                                        const model::KvCache& exact,
                                                        uint32_t first_chunk,
                                                        PrefixEncodeStats* stats) const {
  return impl_->EncodeChunks(tokens, exact, first_chunk, stats);
}

Result<RestoredPrefix> PrefixCodec::Restore(std::span<const uint32_t> tokens,
                                            std::span<const std::vector<uint8_t>> payloads,
                                            PrefixRestoreStats* stats) const {
  return impl_->Restore(tokens, payloads, stats);
}

Result<std::vector<PutChunk>> PrefixCodec::EncodeKvChunks(std::span<const uint32_t> tokens,
                                                          std::span<const ChunkKey> keys,
                                                          std::span<const KvChunk> chunks,
                                                          uint32_t first_chunk,
                                                          PrefixEncodeStats* stats) const {
  return impl_->EncodeKvChunks(tokens, keys, chunks, first_chunk, stats);
}

Result<std::vector<KvChunk>> PrefixCodec::RestoreKvChunks(
    std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
    std::span<const std::vector<uint8_t>> payloads, PrefixRestoreStats* stats) const {
  const std::vector<std::span<const uint8_t>> spans(payloads.begin(), payloads.end());
  return impl_->RestoreKvChunks(tokens, keys, spans, stats);
}

Result<std::vector<KvChunk>> PrefixCodec::RestoreKvChunks(
    std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
    std::span<const std::span<const uint8_t>> payloads, PrefixRestoreStats* stats) const {
  return impl_->RestoreKvChunks(tokens, keys, payloads, stats);
}

Result<std::vector<KvChunkView>> PrefixCodec::ViewRawKvChunks(
    std::span<const uint32_t> tokens, std::span<const ChunkKey> keys,
    std::span<const std::span<const uint8_t>> payloads, uint32_t first_chunk) const {
  return impl_->ViewRawKvChunks(tokens, keys, payloads, first_chunk);
}

Status PrefixCodec::CheckRestoreInputs(std::span<const uint32_t> tokens,
                                       std::span<const ChunkKey> keys,
                                       std::span<const std::vector<uint8_t>> payloads) const {
  return impl_->CheckRestoreInputs(tokens, keys, payloads);
}

Status PrefixCodec::PredictForRestore(std::span<const uint32_t> tokens, uint32_t n_payloads,
                                      model::PredictorCache* out) const {
  return impl_->PredictForRestore(tokens, n_payloads, out);
}

}  // namespace kvstash
