// kvstash::hybrid::HybridEngine: the hybrid runtime (model/hybrid: Gated DeltaNet
// linear layers + attention) as a session::Engine (engines/session/engine.h) with a
// recurrent state: one hybrid::HybridState as the sequence, HybridModel::EvalSequence
// as its prefill, the attention layers' KV (HybridKvLayout: f32) across the interface,
// and the linear layers' conv and delta states as the recurrent state
// (hybrid::ExportRecurrentState / ImportState).
//
// READ ME FIRST
// - KV alone cannot be imported (ImportKv is InvalidArgument): the sequence is the KV
//   AND the recurrent state at its end (ImportKvAndState).
// - Prefill evaluates token by token (the model is independent of how a sequence is
//   split), stopping at each boundary KeepStatesAt named to keep the exact state there.
// - The state as last imported stays readable (imported()) after the prefill moved on:
//   what a restored hit is checked against.
// - max_tokens is unbounded (uint32 max): the attention cache grows with the sequence.
// Ownership: the model must outlive the engine.
// Thread-safety: not thread-safe (one sequence, one driver thread).
#pragma once

#include <map>

#include "engines/session/engine.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_state.h"

namespace kvstash::hybrid {

class HybridEngine final : public session::Engine {
 public:
  // An empty sequence of `model`. REQUIRES: the model has an attention layer.
  explicit HybridEngine(const HybridModel& model);

  const KvLayout& kv_layout() const override { return layout_; }
  uint32_t max_tokens() const override;
  void Clear() override;
  // Errors: InvalidArgument for no tokens or pos that is not the sequence's length;
  // HybridModel::EvalSequence's.
  Result<std::vector<float>> Prefill(std::span<const uint32_t> tokens, uint32_t pos) override;
  // Always InvalidArgument (the sequence needs its recurrent state: ImportKvAndState).
  Status ImportKv(std::span<const KvChunk> chunks, uint32_t tokens) override;
  // ExportKvChunk of the whole sequence. Errors: InvalidArgument for an empty one.
  Result<KvChunk> ExportKv() override;

  bool has_state() const override { return true; }
  void KeepStatesAt(std::span<const uint32_t> boundaries) override;
  // Errors: NotFound when no state was kept at `boundary`.
  Result<RecurrentState> ExportState(uint32_t boundary) override;
  // hybrid::ImportState. Errors: its (InvalidArgument for chunks or tensors that do not fit).
  Status ImportKvAndState(std::span<const KvChunk> chunks, const RecurrentState& state) override;

  // The sequence (generation and checks after a prompt continue it).
  HybridState& state() { return state_; }
  // The state as the last ImportKvAndState left it (empty before the first).
  const HybridState& imported() const { return imported_; }

 private:
  const HybridModel& model_;
  KvLayout layout_;
  HybridState state_, imported_;
  std::vector<uint32_t> keep_;               // boundaries to keep (ascending)
  std::map<uint32_t, RecurrentState> kept_;  // the states kept there
};

}  // namespace kvstash::hybrid
