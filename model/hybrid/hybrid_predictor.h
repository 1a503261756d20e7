// A deterministic int8 copy of a hybrid model (model/hybrid/hybrid_model.h) that
// predicts, for spec coding on the hybrid (docs/format/spec.md §7.6), the attention
// layers' K/V and every linear layer's recurrent state (conv and delta-rule states):
// both sides of the store run it over the same tokens and code the exact tensors
// against its output.
//
// What differs from the fp32 reference forward (hybrid_forward.cc):
// - Every matrix (in_proj_qkv/z/b/a, out_proj, q/k/v/o_proj, the MLP) is int8 with
//   one fp32 scale per (output row, group of `group` input channels)
//   (numerics/quantize.h); products are float(q) * x summed in 8 lanes combined in
//   a fixed tree, one group at a time, scaled per group, groups summed in ascending
//   order. The embedding table (a row lookup), norms, conv weights, dt_bias and A_log
//   stay fp32. The output head is not used: the predictor produces K/V and states.
// - Elementary functions are the project's own: exp = spec::DetExp, sigmoid =
//   1 / (1 + DetExp(-x)), softplus = x for x > 20 else DetLogD(1 + DetExp(x)) (double,
//   software), RoPE inverse frequencies exp(-(2i/r) ln theta) and cos/sin from
//   numerics::DetExp / DetLogD / DetSinCosD (double, software). 1/sqrt is
//   IEEE division of IEEE sqrt (both correctly rounded).
// Why the output is bit-reproducible: as for the RWKV-7 predictor
// (model/rwkv7/rwkv7_predictor.h): correctly rounded binary32/binary64 + - * / sqrt
// only, -ffp-contract=off, no -ffast-math, every sum in a fixed order, no libm.
// Feeding tokens in one call or several gives the same bits (each token's arithmetic
// depends only on the state and the token).
//
// Thread-safety: immutable after Create; Eval may run concurrently on distinct states.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstash/result.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_state.h"

namespace kvstash::hybrid {

struct HybridPredictorOptions {
  // Input channels per int8 scale, clipped to each matrix's width; 1..4096. Default 16.
  int group = 16;
  std::string Name() const { return "int8-g" + std::to_string(group); }
};

class HybridPredictor {
 public:
  // Quantises `model`'s matrices (the model need not outlive the predictor).
  // Errors: InvalidArgument for a group outside 1..4096.
  static Result<HybridPredictor> Create(const HybridModel& model, const HybridPredictorOptions& options);

  HybridPredictor(HybridPredictor&&) noexcept;
  HybridPredictor& operator=(HybridPredictor&&) noexcept;
  ~HybridPredictor();

  const HybridConfig& config() const { return config_; }
  const HybridPredictorOptions& options() const { return options_; }
  // XXH3-64 over the group size and every stored weight value in order.
  uint64_t weights_digest() const;

  // Consumes `tokens` in order, advancing `state` (the predictor's own state of the
  // model's shape: start from HybridState::Empty and feed it the model's tokens).
  // Errors: InvalidArgument for a token >= vocab_size, a state of the wrong shape or a
  // position overflow; checked before the state is touched.
  Status Eval(std::span<const uint32_t> tokens, HybridState* state) const;

 private:
  struct Weights;
  HybridPredictor(HybridConfig config, HybridPredictorOptions options, std::unique_ptr<Weights> w);
  void Forward(uint32_t token, HybridState* state) const;

  HybridConfig config_;
  HybridPredictorOptions options_;
  std::unique_ptr<Weights> weights_;
};

}  // namespace kvstash::hybrid
