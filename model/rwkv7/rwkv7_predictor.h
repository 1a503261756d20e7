// A deterministic, reduced-precision copy of an RWKV-7 model (model/rwkv7/rwkv7_model.h)
// that predicts the model's recurrent state: the decoder-side predictor of spec state
// coding (codec/spec/spec_state_codec.h, docs/format/spec.md "State coding").
//
// What differs from the fp32 reference forward (rwkv7_forward.cc):
// - Matrices (projections, LoRAs, channel-mix MLP, embedding) are held in a cheaper
//   form (Rwkv7PredictorWeights): int8 with one fp32 scale per (output row, group of G
//   input channels) (quantiser: numerics/quantize.h), or rounded to bf16 / fp16, or
//   kept fp32. Vectors (norm weights, token-shift mixes, biases) and the embedding
//   table (a row lookup, no products) stay fp32. The output head is not used: the
//   predictor produces states, not logits.
// - Every elementary function is the project's own (numerics/det_math.h: DetExp;
//   tanh and sigmoid built on it below), never libm.
//
// Why the output is bit-reproducible on every x86-64 machine (and any IEEE-754 target
// that rounds binary32 + - * / sqrt correctly):
// - All arithmetic is binary32 with round-to-nearest-even; each +, -, *, / and sqrt is
//   correctly rounded by IEEE 754, so one operation gives one result everywhere.
// - The build compiles with -ffp-contract=off (no fused multiply-add may merge a * b + c)
//   and without -ffast-math (no reassociation); every sum has a fixed order written
//   down in rwkv7_ops.h (8-lane dot products combined in a fixed tree, in-order sums),
//   so auto-vectorisation keeps the same operations.
// - No libm: exp comes from DetExp (+ - * and exact bit operations only); sqrt is the
//   IEEE square root (sqrtss), correctly rounded by the standard; int8 group products
//   are float(q) * x with float(q) exact.
// - Quantisation of the weights is itself deterministic (quantize.h), so two machines
//   that build the predictor from the same model file hold the same weights; the
//   quantised weights' digest (weights_digest()) lets callers check it.
// Tests: tests/model/rwkv7/rwkv7_predictor_test.cc (golden digests, batching invariance).
//
// Thread-safety: immutable after Create; Eval may run concurrently on distinct states.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstash/result.h"
#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv7_state.h"

namespace kvstash::rwkv7 {

// How the predictor holds its matrices.
enum class Rwkv7WeightFormat : uint8_t {
  kInt8 = 0,  // int8 per (row, group of `group` inputs), fp32 scales
  kBf16 = 1,  // fp32 weights rounded to bf16 (RNE)
  kFp16 = 2,  // fp32 weights rounded to fp16 (RNE, saturating to +-65504)
  kFp32 = 3,  // the exact fp32 weights (a reference point: deterministic maths only)
};

// "int8", "bf16", "fp16", "fp32".
const char* Rwkv7WeightFormatName(Rwkv7WeightFormat f);

struct Rwkv7PredictorOptions {
  // Default: kInt8.
  Rwkv7WeightFormat format = Rwkv7WeightFormat::kInt8;
  // Input channels per int8 scale (kInt8 only), clipped to each matrix's width.
  // 1..4096. Default: 16 (the best int8 row of `kvstash-bench codec --state`).
  int group = 16;
  // The variant's name in tables: "int8-g32", "bf16", ...
  std::string Name() const;
};

class Rwkv7Predictor {
 public:
  // Builds the predictor's weights from `model` (which need not outlive it).
  // Errors: InvalidArgument for a group outside 1..4096 or an unknown format.
  static Result<Rwkv7Predictor> Create(const Rwkv7Model& model, const Rwkv7PredictorOptions& options);

  Rwkv7Predictor(Rwkv7Predictor&&) noexcept;
  Rwkv7Predictor& operator=(Rwkv7Predictor&&) noexcept;
  ~Rwkv7Predictor();

  const Rwkv7Config& config() const;
  const Rwkv7PredictorOptions& options() const;
  // XXH3-64 over the predictor's weights (format, group, every stored value in order).
  uint64_t weights_digest() const;
  // Bytes the predictor's matrices occupy in their stored form (int8 + scales, 2 bytes
  // per bf16/fp16 weight, 4 per fp32), plus the fp32 vectors.
  uint64_t weight_bytes() const;

  // Consumes `tokens` in order, advancing `state` (the predictor's own state: start
  // from Rwkv7State::Zeros and feed it the same tokens as the model). Feeding tokens
  // in one call or several gives the same bits.
  // Errors: InvalidArgument for a token >= n_vocab, a state of the wrong shape, or a
  // token counter overflow; checked before the state is touched.
  Status Eval(std::span<const uint32_t> tokens, Rwkv7State* state) const;

 private:
  struct Weights;
  Rwkv7Predictor(Rwkv7Config config, Rwkv7PredictorOptions options, std::unique_ptr<Weights> w);

  Rwkv7Config config_;
  Rwkv7PredictorOptions options_;
  std::unique_ptr<Weights> weights_;
};

}  // namespace kvstash::rwkv7
