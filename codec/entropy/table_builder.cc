#include "codec/entropy/table_builder.h"

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "codec/entropy/normalize.h"
#include "codec/entropy/rans_format.h"

namespace kvstash::entropy {
namespace {

struct Range {
  uint32_t first = 0;
  uint32_t size = 0;
};

// Shortest cyclic interval holding every symbol with q_v >= tau (see header).
Range SelectRange(const std::vector<double>& q, double tau) {
  const uint32_t n = static_cast<uint32_t>(q.size());
  std::vector<uint32_t> kept;
  for (uint32_t v = 0; v < n; ++v) {
    if (q[v] >= tau) kept.push_back(v);
  }
  if (kept.empty()) {
    uint32_t best = 0;
    for (uint32_t v = 1; v < n; ++v) {
      if (q[v] > q[best]) best = v;
    }
    kept.push_back(best);
  }
  // Gap after kept[i] = number of non-kept symbols before the next kept one (cyclic).
  uint32_t best_gap = 0, best_after = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    const uint32_t next = kept[(i + 1) % kept.size()];
    const uint32_t gap = (next - kept[i] + n - 1) % n;  // single kept: n - 1
    if (gap > best_gap) {
      best_gap = gap;
      best_after = static_cast<uint32_t>(i);
    }
  }
  if (best_gap == 0) return {0, n};
  const uint32_t first = kept[(best_after + 1) % kept.size()];
  return {first, n - best_gap};
}

}  // namespace

Result<FrequencyTable> BuildTable(std::span<const double> pmf, const TableBuildOptions& options) {
  const int precision = options.precision;
  if (precision < kMinPrecision || precision > kMaxPrecision) {
    return Status::InvalidArgument("build table: precision outside 10..15");
  }
  const size_t n = pmf.size();
  if (n < 2 || n > (size_t{1} << kMaxSymbolBits) || (n & (n - 1)) != 0) {
    return Status::InvalidArgument("build table: pmf size must be 2^k, k in 1..16");
  }
  const int symbol_bits = std::countr_zero(n);
  double sum = 0.0;
  for (double p : pmf) {
    if (!std::isfinite(p) || p < 0.0) {
      return Status::InvalidArgument("build table: pmf entries must be finite and >= 0");
    }
    sum = sum + p;
  }
  if (!(sum > 0.0) || !std::isfinite(sum)) {
    return Status::InvalidArgument("build table: pmf has no mass");
  }
  std::vector<double> q(n);
  for (size_t v = 0; v < n; ++v) q[v] = pmf[v] / sum;

  const double slots = static_cast<double>(1u << precision);
  double tau = options.escape_threshold > 0.0
                   ? options.escape_threshold
                   : 3.0 / (2.0 * slots * static_cast<double>(symbol_bits + precision));
  Range range = SelectRange(q, tau);
  while (range.size + (range.size < n ? 1u : 0u) > (1u << precision)) {
    tau = tau * 2.0;
    range = SelectRange(q, tau);
  }

  const bool full = range.size == n;
  std::vector<double> weights;
  weights.reserve(range.size + 1);
  std::vector<char> inside(n, 0);
  for (uint32_t d = 0; d < range.size; ++d) {
    const uint32_t v = (range.first + d) % static_cast<uint32_t>(n);
    inside[v] = 1;
    weights.push_back(q[v]);
  }
  if (!full) {
    double outside = 0.0;
    for (size_t v = 0; v < n; ++v) {
      if (!inside[v]) outside = outside + q[v];
    }
    weights.push_back(outside);
  }
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint32_t> freqs, NormalizeFrequencies(weights, precision));
  uint32_t escape = 0;
  if (!full) {
    escape = freqs.back();
    freqs.pop_back();
  }
  return FrequencyTable::Create(precision, symbol_bits, range.first, std::move(freqs), escape);
}

}  // namespace kvstash::entropy
