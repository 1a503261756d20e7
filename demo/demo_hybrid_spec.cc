// The spec coder of the hybrid demo (demo/demo_hybrid_codec.h): the exact fp32
// KV and recurrent state coded against the deterministic int8 predictor
// (model/hybrid/hybrid_spec.h), decoded client-side on every hit.
#include <algorithm>

#include "demo/demo_hybrid_codec.h"
#include "kvstash/prefix_key.h"
#include "model/hybrid/hybrid_spec.h"

namespace kvstash::demo {
namespace {

class SpecHybridCoder : public HybridKvCoder {
 public:
  SpecHybridCoder(const hybrid::HybridModel& model, std::shared_ptr<const hybrid::HybridPredictor> predictor,
                  std::shared_ptr<const spec::SpecStateArtifact> artifact)
      : model_(model), predictor_(std::move(predictor)), artifact_(std::move(artifact)) {}
  std::string name() const override { return "spec"; }
  std::string codec_id() const override { return "spec"; }
  std::string artifact_digest() const override {
    const uint64_t d = artifact_->digest() ^ predictor_->weights_digest();
    return ToHex(std::span(reinterpret_cast<const uint8_t*>(&d), sizeof d));
  }

  Result<std::vector<uint8_t>> EncodeChunk(std::span<const uint32_t> prefix, const KvChunk& exact,
                                           uint32_t begin, bool partial) const override {
    KVSTASH_RETURN_IF_ERROR(Advance(prefix, begin + exact.tokens));
    return hybrid::EncodeHybridSpecChunk(model_, *artifact_, exact, cursor_, begin, partial);
  }

  Result<std::vector<uint8_t>> EncodeState(std::span<const uint32_t> prefix, const RecurrentState& r) const override {
    KVSTASH_RETURN_IF_ERROR(Advance(prefix, r.boundary_tokens));
    if (cursor_.tokens != r.boundary_tokens) {
      return Status::InvalidArgument("hybrid spec coder: states must be encoded at or after the chunks before them");
    }
    KVSTASH_ASSIGN_OR_RETURN(RecurrentState pred, hybrid::ExportRecurrentState(model_.config(), cursor_));
    return hybrid::EncodeHybridSpecState(model_, *artifact_, r, pred);
  }

  Result<hybrid::HybridState> Restore(std::span<const uint32_t> prefix, std::span<const std::vector<uint8_t>> payloads,
                                      std::span<const uint8_t> record, double* predictor_ms) const override {
    return hybrid::RestoreHybridSpecBoundary(model_, *predictor_, *artifact_, prefix, payloads, record, predictor_ms);
  }

 private:
  // Moves the predictor's state over `prefix` to token `to` (restarting when the
  // prefix changed or the cursor is past `to`).
  Status Advance(std::span<const uint32_t> prefix, uint32_t to) const {
    if (to > prefix.size()) return Status::InvalidArgument("hybrid spec coder: boundary past the prefix");
    const bool same = prefix.size() == prefix_.size() && std::equal(prefix.begin(), prefix.end(), prefix_.begin());
    if (!same || cursor_.tokens > to || cursor_.layers.empty()) {
      prefix_.assign(prefix.begin(), prefix.end());
      cursor_ = hybrid::HybridState::Empty(model_.config());
    }
    return predictor_->Eval(prefix.subspan(cursor_.tokens, to - cursor_.tokens), &cursor_);
  }

  const hybrid::HybridModel& model_;
  std::shared_ptr<const hybrid::HybridPredictor> predictor_;
  std::shared_ptr<const spec::SpecStateArtifact> artifact_;
  mutable std::vector<uint32_t> prefix_;  // the prefix the cursor runs over
  mutable hybrid::HybridState cursor_;    // the predictor's state on it
};

}  // namespace

std::unique_ptr<HybridKvCoder> MakeSpecHybridCoder(const hybrid::HybridModel& model,
                                                   std::shared_ptr<const hybrid::HybridPredictor> predictor,
                                                   std::shared_ptr<const spec::SpecStateArtifact> artifact) {
  return std::make_unique<SpecHybridCoder>(model, std::move(predictor), std::move(artifact));
}

}  // namespace kvstash::demo
