#include "codec/entropy/normalize.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <string>

#include "codec/entropy/rans_format.h"

namespace kvstash::entropy {

Result<std::vector<uint32_t>> NormalizeFrequencies(std::span<const double> weights,
                                                   int precision) {
  if (precision < kMinPrecision || precision > kMaxPrecision) {
    return Status::InvalidArgument("normalise: precision outside 10..15");
  }
  const size_t n = weights.size();
  const int64_t total = int64_t{1} << precision;
  if (n == 0 || n > static_cast<size_t>(total)) {
    return Status::InvalidArgument("normalise: " + std::to_string(n) +
                                   " entries for precision " + std::to_string(precision));
  }
  double sum = 0.0;
  for (double w : weights) {
    if (!std::isfinite(w) || w < 0.0) {
      return Status::InvalidArgument("normalise: weights must be finite and >= 0");
    }
    sum = sum + w;
  }
  if (!(sum > 0.0) || !std::isfinite(sum)) {
    return Status::InvalidArgument("normalise: weights must have a positive finite sum");
  }
  const double m = static_cast<double>(total);
  std::vector<double> target(n);
  std::vector<uint32_t> f(n);
  int64_t assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    target[i] = (weights[i] / sum) * m;
    const double fl = std::floor(target[i]);
    f[i] = fl < 1.0 ? 1u : static_cast<uint32_t>(fl);
    assigned += f[i];
  }
  int64_t d = total - assigned;
  if (d > 0) {
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    auto remainder = [&](uint32_t i) { return target[i] - static_cast<double>(f[i]); };
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return remainder(a) > remainder(b);  // stable: ties keep index order
    });
    for (int64_t k = 0; k < d; ++k) f[order[k]] += 1;
  } else if (d < 0) {
    // Min-heap on (t_i / f_i, i).
    using Item = std::pair<double, uint32_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    for (uint32_t i = 0; i < n; ++i) {
      if (f[i] >= 2) heap.push({target[i] / f[i], i});
    }
    for (; d < 0; ++d) {
      const uint32_t i = heap.top().second;  // non-empty: sum(f_i - 1) >= -D as n <= M
      heap.pop();
      f[i] -= 1;
      if (f[i] >= 2) heap.push({target[i] / f[i], i});
    }
  }
  return f;
}

}  // namespace kvstash::entropy
