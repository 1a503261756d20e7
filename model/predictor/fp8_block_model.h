// The FP8 block-quantised copy of a model that the published speculative KV coding
// uses as its predictor (docs/methods.md §1: "the FP8 (e4m3, 128-element blocks with
// bf16 scales) checkpoint of the target model"), simulated in fp32:
//   weights: each row of every projection cut into blocks of 128 input channels; per
//            block scale s = bf16(amax / 448); w' = e4m3(w / s) * s;
//   activations: per token and 128-channel block, dynamically quantised the same way
//            before every projection (as FP8 block GEMMs in vLLM/SGLang do).
// Embeddings and norms stay as they are. The result is NOT deterministic across BLAS
// builds (it is a reference for the published method's ideal code length, not a
// predictor the spec codec codes against).
//
// Thread-safety: Fp8BlockLinear::Apply is const and reentrant.
#pragma once

#include <memory>

#include "model/forward/linear.h"
#include "model/forward/model.h"

namespace kvstash::model {

// Block size along the input dimension.
inline constexpr uint32_t kFp8BlockSize = 128;

class Fp8BlockLinear final : public Linear {
 public:
  // Quantises a dense [out, in] weight. InvalidArgument for a non-dense linear.
  static Result<std::unique_ptr<Fp8BlockLinear>> FromDense(const Linear& dense);
  uint32_t out_features() const override { return dense_->out_features(); }
  uint32_t in_features() const override { return dense_->in_features(); }
  void Apply(const float* x, uint32_t rows, float* y) const override;

 private:
  std::unique_ptr<DenseLinear> dense_;  // holds the dequantised fp8 weights
};

// Quantise-dequantises n values in blocks of kFp8BlockSize in place (bf16 block scales).
void Fp8BlockRoundTrip(float* x, size_t n);

// Replaces every projection of `model` (not the embedding / lm_head) by its
// Fp8BlockLinear. Errors: InvalidArgument for non-dense projections.
Status QuantizeModelFp8Block(Model* model);

}  // namespace kvstash::model
