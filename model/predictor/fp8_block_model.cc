#include "model/predictor/fp8_block_model.h"

#include <cmath>
#include <vector>

#include "kvstash/dtype.h"

namespace kvstash::model {

void Fp8BlockRoundTrip(float* x, size_t n) {
  for (size_t b = 0; b < n; b += kFp8BlockSize) {
    const size_t len = std::min<size_t>(kFp8BlockSize, n - b);
    float amax = 0.0f;
    for (size_t i = 0; i < len; ++i) {
      if (std::isfinite(x[b + i])) amax = std::max(amax, std::fabs(x[b + i]));
    }
    if (amax == 0.0f) continue;
    const float s = Bf16ToF32(F32ToBf16(amax / kFp8E4M3Max));
    if (!(s > 0.0f)) continue;  // amax below bf16's range: leave the block
    for (size_t i = 0; i < len; ++i) x[b + i] = Fp8E4M3ToF32(F32ToFp8E4M3(x[b + i] / s)) * s;
  }
}

Result<std::unique_ptr<Fp8BlockLinear>> Fp8BlockLinear::FromDense(const Linear& linear) {
  const auto* dense = dynamic_cast<const DenseLinear*>(&linear);
  if (dense == nullptr) return Status::InvalidArgument("fp8 block model needs dense projections");
  auto w = std::make_shared<std::vector<float>>(dense->weights());
  const uint32_t out = dense->out_features(), in = dense->in_features();
  for (uint32_t r = 0; r < out; ++r) Fp8BlockRoundTrip(w->data() + static_cast<size_t>(r) * in, in);
  KVSTASH_ASSIGN_OR_RETURN(auto d, DenseLinear::Create(std::move(w), out, in));
  std::unique_ptr<Fp8BlockLinear> l(new Fp8BlockLinear());
  l->dense_ = std::move(d);
  return l;
}

void Fp8BlockLinear::Apply(const float* x, uint32_t rows, float* y) const {
  const uint32_t in = in_features();
  std::vector<float> q(x, x + static_cast<size_t>(rows) * in);
  for (uint32_t r = 0; r < rows; ++r) Fp8BlockRoundTrip(q.data() + static_cast<size_t>(r) * in, in);
  dense_->Apply(q.data(), rows, y);
}

Status QuantizeModelFp8Block(Model* model) {
  for (LayerWeights& L : model->layers) {
    for (std::unique_ptr<Linear>* p : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      KVSTASH_ASSIGN_OR_RETURN(auto q, Fp8BlockLinear::FromDense(**p));
      *p = std::move(q);
    }
  }
  return Status::Ok();
}

}  // namespace kvstash::model
