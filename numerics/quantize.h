// Symmetric int8 / int16 quantisation of fp32 rows (weights per output channel, activations
// per token), optionally in groups of G consecutive channels, for the spec predictor.
//
// For each row (and group): amax = max |x| over finite x; scale = amax / Q (1 when
// amax is 0; Q = 127 for int8, 32767 for int16); q = clamp(rne(x / scale), -Q, Q), NaN -> 0, +-Inf -> +-127.
// Every step is an IEEE-exact or correctly rounded operation (division once per
// element, round-half-even by the 1.5*2^23 trick), so the same inputs give the same
// bits on every machine (docs/architecture.md §3). Dequantised value = q * scale.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::spec {

// Quantised rows: q [rows, cols] row-major; scales [rows, groups], groups = ceil(cols/group).
struct Int8Rows {
  int rows = 0, cols = 0, group = 0;
  std::vector<int8_t> q;
  std::vector<float> scales;

  int groups() const { return group > 0 ? (cols + group - 1) / group : 0; }
};

// Quantises x [rows, cols] with one scale per (row, group of `group` channels); use
// group = cols for one scale per row. REQUIRES: x.size() == rows * cols, group >= 1.
// Errors: InvalidArgument.
Status QuantizeRowsInt8(std::span<const float> x, int rows, int cols, int group, Int8Rows* out);

// 16-bit variant for activations (W8A16): amax / 32767, q in [-32767, 32767].
struct Int16Rows {
  int rows = 0, cols = 0, group = 0;
  std::vector<int16_t> q;
  std::vector<float> scales;

  int groups() const { return group > 0 ? (cols + group - 1) / group : 0; }
};
Status QuantizeRowsInt16(std::span<const float> x, int rows, int cols, int group, Int16Rows* out);

// Round half to even of x for |x| < 2^22 (exact; +- only).
float RoundHalfEven(float x);

}  // namespace kvstash::spec
