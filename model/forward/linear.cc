#include "model/forward/linear.h"

#include <cblas.h>

#include <string>

namespace kvstash::model {

Result<std::unique_ptr<DenseLinear>> DenseLinear::Create(std::shared_ptr<const std::vector<float>> w,
                                                         uint32_t out, uint32_t in) {
  if (w == nullptr || out == 0 || in == 0 || w->size() != static_cast<uint64_t>(out) * in) {
    return Status::InvalidArgument("linear weight has " + std::to_string(w ? w->size() : 0) +
                                   " values, want " + std::to_string(out) + " x " + std::to_string(in));
  }
  return std::unique_ptr<DenseLinear>(new DenseLinear(std::move(w), out, in));
}

void DenseLinear::Apply(const float* x, uint32_t rows, float* y) const {
  if (rows == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(out_),
              static_cast<int>(in_), 1.0f, x, static_cast<int>(in_), w_->data(), static_cast<int>(in_),
              0.0f, y, static_cast<int>(out_));
}

int SetBlasThreads(int n) {
  if (n > 0) openblas_set_num_threads(n);
  return openblas_get_num_threads();
}

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace kvstash::model
