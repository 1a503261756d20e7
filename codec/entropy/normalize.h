// Deterministic normalisation of non-negative weights to integer frequencies that sum
// to 2^P with a floor of 1 for every entry.
//
// Algorithm (every step is exact or a single correctly rounded IEEE operation, so the
// result is the same on every machine; tests/codec/entropy/data/gen_golden_tables.py mirrors it):
//   1. W = w_0 + w_1 + ... (summed in index order); M = 2^P.
//   2. Target t_i = (w_i / W) * M, initial f_i = max(1, floor(t_i)).
//   3. D = M - sum f_i.
//      D > 0 (largest remainder): add 1 to the D entries with the largest t_i - f_i,
//        ties to the lower index. (Only entries with t_i - f_i > 0 can be chosen.)
//      D < 0 (floors overshot): repeat -D times: among entries with f_i >= 2 take the
//        one with the smallest t_i / f_i (the cheapest decrement to first order of the
//        code length t_i * log(1/f_i)), ties to the lower index, and subtract 1.
// REQUIRES of the input (else InvalidArgument): 1 <= n <= 2^P, P in 10..15, every w_i
// finite and >= 0, W > 0 and finite.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::entropy {

Result<std::vector<uint32_t>> NormalizeFrequencies(std::span<const double> weights,
                                                   int precision);

}  // namespace kvstash::entropy
