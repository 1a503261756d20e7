#include "numerics/quantize.h"

#include <string>

#include "numerics/quantize_group.h"

namespace kvstash::spec {

float RoundHalfEven(float x) { return RoundHalfEvenInline(x); }

namespace {

template <typename Rows, typename Q>
Status QuantizeRows(std::span<const float> x, int rows, int cols, int group, float qmax, Rows* out) {
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
  for (int r = 0; r < rows; ++r) {
    for (int g = 0; g < groups; ++g) {
      const size_t begin = static_cast<size_t>(r) * cols + static_cast<size_t>(g) * group;
      const size_t len = std::min<size_t>(group, cols - static_cast<size_t>(g) * group);
      out->scales[static_cast<size_t>(r) * groups + g] =
          QuantizeGroup<Q>(x.data() + begin, len, qmax, out->q.data() + begin);
    }
  }
  return Status::Ok();
}

}  // namespace

Status QuantizeRowsInt8(std::span<const float> x, int rows, int cols, int group, Int8Rows* out) {
  return QuantizeRows<Int8Rows, int8_t>(x, rows, cols, group, 127.0f, out);
}

Status QuantizeRowsInt16(std::span<const float> x, int rows, int cols, int group, Int16Rows* out) {
  return QuantizeRows<Int16Rows, int16_t>(x, rows, cols, group, 32767.0f, out);
}

}  // namespace kvstash::spec
