// Helpers for the rANS tests: portable seeded sampling and table sets.
//
// std::uniform_*_distribution differ between standard libraries, so samples are drawn
// from std::mt19937_64 (bit-exact everywhere) by inverse CDF over a pmf.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "codec/entropy/pmf.h"
#include "codec/entropy/table_builder.h"
#include "codec/entropy/table_set.h"

namespace kvstash::entropy::testing {

// Uniform double in [0, 1) from 53 random bits.
inline double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

// n symbols drawn from `pmf` (need not be normalised).
inline std::vector<uint16_t> Sample(const std::vector<double>& pmf, size_t n, uint64_t seed) {
  std::vector<double> cdf(pmf.size());
  double acc = 0.0;
  for (size_t v = 0; v < pmf.size(); ++v) cdf[v] = acc = acc + pmf[v];
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double u = Uniform(rng) * acc;
    const size_t v = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
    out[i] = static_cast<uint16_t>(std::min(v, pmf.size() - 1));
  }
  return out;
}

inline std::vector<uint8_t> ToBytes(const std::vector<uint16_t>& v) {
  return std::vector<uint8_t>(v.begin(), v.end());
}

// `count` Laplace tables over a two's-complement alphabet, scales 0.5 * 1.7^t, so
// that the tables differ and their direct ranges (and escapes) differ too.
inline TableSet LaplaceTables(int precision, int symbol_bits, int count) {
  std::vector<FrequencyTable> tables;
  for (int t = 0; t < count; ++t) {
    double b = 0.5;
    for (int i = 0; i < t; ++i) b *= 1.7;
    auto pmf = LaplacePmf(symbol_bits, SymbolMapping::kTwosComplement, 0.0, b).value();
    tables.push_back(BuildTable(pmf, {.precision = precision}).value());
  }
  return TableSet::Create(std::move(tables)).value();
}

}  // namespace kvstash::entropy::testing
