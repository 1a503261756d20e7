// ggml's Q8_1 quantiser, the Q4_1 x Q8_1 dot product and rms_norm (see ggml_ops.h).
#include "numerics/ggml_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvstash/dtype_bits.h"
#include "numerics/det_math.h"

namespace kvstash::model::ggml {

using spec::DAdd;
using spec::DDiv;
using spec::DMul;

void QuantizeRowQ8_1(const float* x, uint32_t n, BlockQ8_1* out) {
  for (uint32_t b = 0; b < n / kBlock; ++b, x += kBlock) {
    float amax = 0.0f;
    for (uint32_t j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = DDiv(amax, 127.0f);
    const float id = amax != 0.0f ? DDiv(127.0f, amax) : 0.0f;
    int32_t sum = 0;
    for (uint32_t j = 0; j < kBlock; ++j) {
      // nearbyint in the default rounding mode: half to even, as _mm256_round_ps.
      const auto q = static_cast<int32_t>(std::nearbyint(DMul(x[j], id)));
      out[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = F32ToF16(d);
    out[b].s = F32ToF16(DMul(d, static_cast<float>(sum)));
  }
}

Status UnpackQ4_1(std::span<const uint8_t> stored, std::span<UnpackedQ4_1> out) {
  if (stored.size() != static_cast<size_t>(kQ4_1Bytes) * out.size()) {
    return Status::InvalidArgument("Q4_1: stored bytes do not hold the requested blocks");
  }
  for (size_t b = 0; b < out.size(); ++b) {
    const uint8_t* p = stored.data() + b * kQ4_1Bytes;
    out[b].d = F16ToF32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
    out[b].m = F16ToF32(static_cast<uint16_t>(p[2] | (p[3] << 8)));
    for (uint32_t j = 0; j < kBlock / 2; ++j) {
      out[b].q[j] = p[4 + j] & 15;
      out[b].q[j + kBlock / 2] = p[4 + j] >> 4;
    }
  }
  return Status::Ok();
}

float DotQ4_1Q8_1(const UnpackedQ4_1* w, const BlockQ8_1* x, uint32_t blocks) {
  float acc = 0.0f, summs = 0.0f;
  for (uint32_t b = 0; b < blocks; ++b) {
    int32_t sumi = 0;
    for (uint32_t j = 0; j < kBlock; ++j) sumi += static_cast<int32_t>(w[b].q[j]) * x[b].qs[j];
    acc = DAdd(acc, DMul(DMul(w[b].d, F16ToF32(x[b].d)), static_cast<float>(sumi)));
    summs = DAdd(summs, DMul(w[b].m, F16ToF32(x[b].s)));
  }
  return DAdd(acc, summs);
}

void RmsNormRow(float* row, uint32_t n, const float* w, float eps) {
  double sum = 0.0;
  for (uint32_t i = 0; i < n; ++i) sum += static_cast<double>(DMul(row[i], row[i]));
  const auto mean = static_cast<float>(sum / n);
  const float scale = DDiv(1.0f, std::sqrt(DAdd(mean, eps)));
  for (uint32_t i = 0; i < n; ++i) row[i] = DMul(DMul(row[i], scale), w[i]);
}

}  // namespace kvstash::model::ggml
