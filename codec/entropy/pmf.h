// Discrete probability mass functions over a symbol alphabet, the inputs of
// BuildTable() (table_builder.h). Build-time only: the coders never evaluate these.
//
// A pmf is a vector of 2^symbol_bits doubles indexed by symbol value. Symbols stand
// for integers through a SymbolMapping: kUnsigned (symbol v is the integer v) or
// kTwosComplement (v < 2^(k-1) is v, else v - 2^k; e.g. residuals centred on 0).
// Continuous densities are integrated over each integer's rounding cell
// [v - 1/2, v + 1/2]; mass outside the alphabet's cells is dropped (the builder
// renormalises). All functions use DetExp/DetErfc (numerics/det_math_double.h), so
// their output is the same on every machine.
//
// Errors (InvalidArgument): symbol_bits outside 1..16, non-finite or non-positive
// scale, mixtures with mismatched sizes or negative weights, empty histograms.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::entropy {

enum class SymbolMapping { kUnsigned, kTwosComplement };

// The integer a symbol stands for under `mapping` in a symbol_bits-bit alphabet.
int64_t SymbolValue(uint32_t symbol, int symbol_bits, SymbolMapping mapping);

// Laplace(mu, b): density exp(-|x - mu| / b) / (2b), integrated over cells.
Result<std::vector<double>> LaplacePmf(int symbol_bits, SymbolMapping mapping, double mu,
                                       double b);
// Gaussian(mu, sigma^2) integrated over cells (tails through erfc, no cancellation).
Result<std::vector<double>> GaussianPmf(int symbol_bits, SymbolMapping mapping, double mu,
                                        double sigma);

// One Gaussian component of a mixture.
struct GaussianComponent {
  double weight;  // >= 0; the weights need not sum to 1
  double mu;
  double sigma;   // > 0
};
// sum_k weight_k * GaussianPmf(mu_k, sigma_k), cell by cell.
Result<std::vector<double>> GaussianMixturePmf(int symbol_bits, SymbolMapping mapping,
                                               std::span<const GaussianComponent> components);
// weight_a * a + weight_b * b (e.g. a parametric model plus a marginal histogram as
// the outlier escape, as in speculative KV coding). REQUIRES a.size() == b.size().
Result<std::vector<double>> MixPmfs(std::span<const double> a, double weight_a,
                                    std::span<const double> b, double weight_b);

// Empirical histogram: counts[v] / sum(counts). counts.size() must be 2^k, k in 1..16.
Result<std::vector<double>> HistogramPmf(std::span<const uint64_t> counts);

}  // namespace kvstash::entropy
