#include "codec/spec/quantize.h"

#include <string>

#include "codec/spec/det_math.h"

namespace kvstash::spec {

float RoundHalfEven(float x) {
  // Adding and subtracting 1.5 * 2^23 leaves x rounded to an integer by the FPU's
  // round-to-nearest-even (valid for |x| < 2^22).
  constexpr float kMagic = 12582912.0f;
  return DSub(DAdd(x, kMagic), kMagic);
}

namespace {

template <typename Rows, typename Q>
Status QuantizeRows(std::span<const float> x, int rows, int cols, int group, float qmax,
                    Rows* out) {
  if (rows < 0 || cols < 0 || group < 1) {
    return Status::InvalidArgument("quantise: rows, cols >= 0 and group >= 1 required");
  }
  if (x.size() != static_cast<size_t>(rows) * cols) {
    return Status::InvalidArgument("quantise: input has " + std::to_string(x.size()) +
                                   " values, expected rows*cols");
  }
  out->rows = rows;
  out->cols = cols;
  out->group = group;
  const int groups = out->groups();
  out->q.resize(static_cast<size_t>(rows) * cols);
  out->scales.resize(static_cast<size_t>(rows) * groups);
  constexpr float kInf = 3.40282347e38f;
  for (int r = 0; r < rows; ++r) {
    for (int g = 0; g < groups; ++g) {
      const size_t begin = static_cast<size_t>(r) * cols + static_cast<size_t>(g) * group;
      const size_t len = std::min<size_t>(group, cols - static_cast<size_t>(g) * group);
      float amax = 0.0f;
      for (size_t i = 0; i < len; ++i) {
        const float a = x[begin + i] < 0.0f ? -x[begin + i] : x[begin + i];
        if (a > amax && a <= kInf) amax = a;  // NaN and Inf never win
      }
      const float scale = amax > 0.0f ? DDiv(amax, qmax) : 1.0f;
      out->scales[static_cast<size_t>(r) * groups + g] = scale;
      for (size_t i = 0; i < len; ++i) {
        const float v = x[begin + i];
        Q q = 0;
        if (v == v) {  // not NaN
          float t = DDiv(v, scale);
          t = t > qmax ? qmax : (t < -qmax ? -qmax : t);
          q = static_cast<Q>(RoundHalfEven(t));
        }
        out->q[begin + i] = q;
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status QuantizeRowsInt8(std::span<const float> x, int rows, int cols, int group, Int8Rows* out) {
  return QuantizeRows<Int8Rows, int8_t>(x, rows, cols, group, 127.0f, out);
}

Status QuantizeRowsInt16(std::span<const float> x, int rows, int cols, int group,
                         Int16Rows* out) {
  return QuantizeRows<Int16Rows, int16_t>(x, rows, cols, group, 32767.0f, out);
}

}  // namespace kvstash::spec
