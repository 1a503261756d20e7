#include "engines/hybrid/hybrid_engine.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kvstash::hybrid {

HybridEngine::HybridEngine(const HybridModel& model)
    : model_(model), layout_(HybridKvLayout(model.config())), state_(HybridState::Empty(model.config())) {}

uint32_t HybridEngine::max_tokens() const { return std::numeric_limits<uint32_t>::max(); }

void HybridEngine::Clear() {
  state_ = HybridState::Empty(model_.config());
  kept_.clear();
}

Result<std::vector<float>> HybridEngine::Prefill(std::span<const uint32_t> tokens, uint32_t pos) {
  if (tokens.empty()) return Status::InvalidArgument("hybrid engine: prefill of no tokens");
  if (pos != state_.tokens) {
    return Status::InvalidArgument("hybrid engine: prefill at position " + std::to_string(pos) +
                                   " of a sequence of " + std::to_string(state_.tokens) + " tokens");
  }
  const uint64_t end = uint64_t{pos} + tokens.size();
  std::vector<float> logits(model_.config().vocab_size);
  uint32_t at = pos;
  // Up to each kept boundary inside (pos, end], then the rest with the last logits.
  for (uint32_t b : keep_) {
    if (b <= at || b > end) continue;
    const bool last = b == end;
    KVSTASH_RETURN_IF_ERROR(model_.EvalSequence(tokens.subspan(at - pos, b - at), &state_,
                                                last ? std::span<float>(logits) : std::span<float>()));
    at = b;
    KVSTASH_ASSIGN_OR_RETURN(kept_[b], ExportRecurrentState(model_.config(), state_));
  }
  if (at < end) KVSTASH_RETURN_IF_ERROR(model_.EvalSequence(tokens.subspan(at - pos), &state_, logits));
  return logits;
}

Status HybridEngine::ImportKv(std::span<const KvChunk>, uint32_t) {
  Clear();
  return Status::InvalidArgument("hybrid engine: KV cannot be imported without the recurrent state");
}

Result<KvChunk> HybridEngine::ExportKv() { return ExportKvChunk(model_.config(), state_, 0, state_.tokens); }

void HybridEngine::KeepStatesAt(std::span<const uint32_t> boundaries) {
  keep_.assign(boundaries.begin(), boundaries.end());
  std::sort(keep_.begin(), keep_.end());
  kept_.clear();
}

Result<RecurrentState> HybridEngine::ExportState(uint32_t boundary) {
  const auto it = kept_.find(boundary);
  if (it == kept_.end()) {
    return Status::NotFound("hybrid engine: no state kept at token " + std::to_string(boundary));
  }
  return it->second;
}

Status HybridEngine::ImportKvAndState(std::span<const KvChunk> chunks, const RecurrentState& state) {
  Clear();
  KVSTASH_ASSIGN_OR_RETURN(state_, ImportState(model_.config(), chunks, state));
  imported_ = state_;
  return Status::Ok();
}

}  // namespace kvstash::hybrid
