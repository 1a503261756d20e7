// Linear: the matrix-product step of the forward pass, y = x W^T.
//
// The forward pass (model/forward/prefill.h) calls every projection through this interface,
// so a variant with other weights and arithmetic (the spec codec's quantised
// predictor: int8 x int8 -> int32) can replace DenseLinear without touching the rest
// of the architecture code.
//
// Shapes: W is [out_features, in_features] row-major (the nn.Linear convention);
// x is [rows, in_features], y is [rows, out_features], both row-major fp32.
//
// Thread-safety: Apply is const and may be called concurrently on one object.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::model {

class Linear {
 public:
  virtual ~Linear() = default;
  virtual uint32_t out_features() const = 0;
  virtual uint32_t in_features() const = 0;
  // y[r, o] = sum_i x[r, i] * W[o, i]. REQUIRES: x holds rows * in_features() floats
  // and y rows * out_features(); they do not overlap.
  virtual void Apply(const float* x, uint32_t rows, float* y) const = 0;
};

// fp32 weights, product by a multi-threaded BLAS SGEMM (OpenBLAS): accumulation
// order is the BLAS kernel's, so results differ from other implementations by fp32
// rounding only. The weight buffer may be shared (tied embeddings).
class DenseLinear final : public Linear {
 public:
  // InvalidArgument if w->size() != out * in or a dimension is 0.
  static Result<std::unique_ptr<DenseLinear>> Create(std::shared_ptr<const std::vector<float>> w,
                                                     uint32_t out, uint32_t in);
  uint32_t out_features() const override { return out_; }
  uint32_t in_features() const override { return in_; }
  void Apply(const float* x, uint32_t rows, float* y) const override;
  const std::vector<float>& weights() const { return *w_; }

 private:
  DenseLinear(std::shared_ptr<const std::vector<float>> w, uint32_t out, uint32_t in)
      : w_(std::move(w)), out_(out), in_(in) {}
  std::shared_ptr<const std::vector<float>> w_;
  uint32_t out_, in_;
};

// Sets the thread count of the BLAS library (0: leave its default, which OpenBLAS
// takes from OPENBLAS_NUM_THREADS or the core count). Returns the count in effect.
int SetBlasThreads(int n);
int BlasThreads();

}  // namespace kvstash::model
