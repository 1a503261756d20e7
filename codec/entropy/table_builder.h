// BuildTable: from a discrete pmf over the whole alphabet to a FrequencyTable.
//
// Steps (deterministic; tests/codec/entropy/data/gen_golden_tables.py mirrors them):
//   1. q_v = pmf_v / sum(pmf) (sum in index order).
//   2. Direct range. A symbol is "kept" when q_v >= tau, where
//        tau = options.escape_threshold, or by default 3 / (2 * 2^P * (k + P))
//      (k = symbol_bits). Rationale: giving a symbol its own entry costs every other
//      symbol about 1/(2^P ln 2) bits through the floor of 1; escaping it costs it
//      about k + P more bits; tau balances the two to first order. If nothing is kept,
//      the first most probable symbol is. The direct range is the shortest cyclic
//      interval holding every kept symbol: the complement of the longest cyclic run of
//      non-kept symbols (the first such run in index order on ties).
//      If the range and the escape need more than 2^P entries, tau is doubled and
//      step 2 repeated.
//   3. Weights: q_v for the range's symbols in range order, then (when the range is
//      not the whole alphabet) the escape with the mass outside the range. Integer
//      frequencies from NormalizeFrequencies() (normalize.h): floor 1 for every entry.
//
// Errors (InvalidArgument): pmf size not 2^k (k in 1..16), negative or non-finite
// entries, zero total mass, precision outside 10..15.
// Thread-safety: pure function.
#pragma once

#include <span>

#include "codec/entropy/frequency_table.h"
#include "kvstash/result.h"

namespace kvstash::entropy {

struct TableBuildOptions {
  // Probability precision P: frequencies sum to 2^P. Default: 12.
  int precision = 12;
  // Keep threshold tau of step 2; <= 0 selects the default formula. Default: 0.
  double escape_threshold = 0.0;
};

Result<FrequencyTable> BuildTable(std::span<const double> pmf, const TableBuildOptions& options);

}  // namespace kvstash::entropy
