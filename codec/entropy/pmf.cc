#include "codec/entropy/pmf.h"

#include <cmath>
#include <string>

#include "codec/entropy/rans_format.h"
#include "numerics/det_math_double.h"

namespace kvstash::entropy {
namespace {

constexpr double kInvSqrt2 = 7.07106781186547524401e-01;

Status CheckBits(int symbol_bits) {
  if (symbol_bits < 1 || symbol_bits > kMaxSymbolBits) {
    return Status::InvalidArgument("pmf: symbol_bits " + std::to_string(symbol_bits) +
                                   " outside 1..16");
  }
  return Status::Ok();
}

Status CheckScale(double mu, double scale) {
  if (!std::isfinite(mu) || !std::isfinite(scale) || !(scale > 0.0)) {
    return Status::InvalidArgument("pmf: location must be finite and scale finite and > 0");
  }
  return Status::Ok();
}

// Mass of Laplace(mu, b) on [lo, hi], computed from the side(s) of mu it lies on.
double LaplaceCell(double lo, double hi, double mu, double b) {
  if (hi <= mu) return 0.5 * (numerics::DetExp((hi - mu) / b) - numerics::DetExp((lo - mu) / b));
  if (lo >= mu) return 0.5 * (numerics::DetExp(-(lo - mu) / b) - numerics::DetExp(-(hi - mu) / b));
  return 1.0 - 0.5 * numerics::DetExp(-(mu - lo) / b) - 0.5 * numerics::DetExp(-(hi - mu) / b);
}

// Upper tail Q(z) = P(Z > z) of a standard normal.
double UpperTail(double z) { return 0.5 * numerics::DetErfc(z * kInvSqrt2); }

double GaussianCell(double lo, double hi, double mu, double sigma) {
  const double zl = (lo - mu) / sigma;
  const double zh = (hi - mu) / sigma;
  // Beyond 40 sd both tails are exactly 0 in double (erfc(28.3) < 2^-1074): skip the
  // series, which makes 16-bit pmfs of narrow Gaussians cheap. Results are unchanged.
  if (zl >= 40.0 || zh <= -40.0) return 0.0;
  if (zl >= 0.0) return UpperTail(zl) - UpperTail(zh);
  if (zh <= 0.0) return UpperTail(-zh) - UpperTail(-zl);
  return 1.0 - UpperTail(-zl) - UpperTail(zh);
}

template <typename CellFn>
std::vector<double> Integrate(int symbol_bits, SymbolMapping mapping, CellFn cell) {
  std::vector<double> pmf(size_t{1} << symbol_bits);
  for (uint32_t v = 0; v < pmf.size(); ++v) {
    const double c = static_cast<double>(SymbolValue(v, symbol_bits, mapping));
    const double m = cell(c - 0.5, c + 0.5);
    pmf[v] = m > 0.0 ? m : 0.0;  // rounding can leave -0 or a tiny negative
  }
  return pmf;
}

}  // namespace

int64_t SymbolValue(uint32_t symbol, int symbol_bits, SymbolMapping mapping) {
  if (mapping == SymbolMapping::kTwosComplement && symbol >= (1u << (symbol_bits - 1))) {
    return static_cast<int64_t>(symbol) - (int64_t{1} << symbol_bits);
  }
  return symbol;
}

Result<std::vector<double>> LaplacePmf(int symbol_bits, SymbolMapping mapping, double mu,
                                       double b) {
  KVSTASH_RETURN_IF_ERROR(CheckBits(symbol_bits));
  KVSTASH_RETURN_IF_ERROR(CheckScale(mu, b));
  return Integrate(symbol_bits, mapping,
                   [&](double lo, double hi) { return LaplaceCell(lo, hi, mu, b); });
}

Result<std::vector<double>> GaussianPmf(int symbol_bits, SymbolMapping mapping, double mu,
                                        double sigma) {
  KVSTASH_RETURN_IF_ERROR(CheckBits(symbol_bits));
  KVSTASH_RETURN_IF_ERROR(CheckScale(mu, sigma));
  return Integrate(symbol_bits, mapping,
                   [&](double lo, double hi) { return GaussianCell(lo, hi, mu, sigma); });
}

Result<std::vector<double>> GaussianMixturePmf(int symbol_bits, SymbolMapping mapping,
                                               std::span<const GaussianComponent> components) {
  KVSTASH_RETURN_IF_ERROR(CheckBits(symbol_bits));
  if (components.empty()) return Status::InvalidArgument("pmf: empty mixture");
  std::vector<double> pmf(size_t{1} << symbol_bits, 0.0);
  for (const GaussianComponent& g : components) {
    if (!std::isfinite(g.weight) || g.weight < 0.0) {
      return Status::InvalidArgument("pmf: mixture weights must be finite and >= 0");
    }
    KVSTASH_ASSIGN_OR_RETURN(std::vector<double> part,
                             GaussianPmf(symbol_bits, mapping, g.mu, g.sigma));
    for (size_t v = 0; v < pmf.size(); ++v) pmf[v] = pmf[v] + g.weight * part[v];
  }
  return pmf;
}

Result<std::vector<double>> MixPmfs(std::span<const double> a, double weight_a,
                                    std::span<const double> b, double weight_b) {
  if (a.size() != b.size()) return Status::InvalidArgument("pmf: mixing pmfs of different sizes");
  if (!std::isfinite(weight_a) || !std::isfinite(weight_b) || weight_a < 0.0 ||
      weight_b < 0.0) {
    return Status::InvalidArgument("pmf: mixture weights must be finite and >= 0");
  }
  std::vector<double> pmf(a.size());
  for (size_t v = 0; v < a.size(); ++v) pmf[v] = weight_a * a[v] + weight_b * b[v];
  return pmf;
}

Result<std::vector<double>> HistogramPmf(std::span<const uint64_t> counts) {
  const size_t n = counts.size();
  if (n < 2 || n > (size_t{1} << kMaxSymbolBits) || (n & (n - 1)) != 0) {
    return Status::InvalidArgument("pmf: histogram size must be 2^k, k in 1..16");
  }
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return Status::InvalidArgument("pmf: empty histogram");
  std::vector<double> pmf(n);
  const double t = static_cast<double>(total);
  for (size_t v = 0; v < n; ++v) pmf[v] = static_cast<double>(counts[v]) / t;
  return pmf;
}

}  // namespace kvstash::entropy
