// The per-scalar maths of spec state coding (codec/spec/spec_state_codec.h): the fp32
// ordinal domain, the split of a residual into an rANS token plus raw low bits, and
// the context (table) of a scalar, all integer-only given the prediction's bits.
//
// READ ME FIRST
// - Residual r = Ordinal32(true) - Ordinal32(pred) modulo 2^32, read as int32. The
//   ordinal map is a bijection on all 2^32 patterns (NaN, Inf, -0 included), so every
//   state is codable and true = FromOrdinal32(Ordinal32(pred) + r) exactly.
// - Token (8 bits): magnitude class M of |r| (|r| as uint32, so INT32_MIN has 2^31)
//   plus a sign bit 128 (never set for r = 0):
//     |r| < 4:  M = |r|, no raw bits;
//     else      k = floor(log2 |r|) (2..31), M = 4 + 4 (k - 2) + the two bits of |r|
//               below its leading one, and the k - 2 bits under those are raw bits.
//   So M <= 123 and a residual of k + 1 significant bits costs its token plus k - 2
//   raw bits: the two leading bits, where a peaked density is far from uniform, are
//   entropy-coded; the low ones are nearly uniform and sent as they are.
// - Context. A scalar's table is chosen from its predicted spread in ulps of the
//   prediction, in quarter octaves:
//     s4 = offset(tensor) + (L4(rowmax) + L4(colmax)) / 2 - 4 E(pred) + 92
//   where L4(x) = 4 E(x) + m2(x) (E the biased exponent field, m2 the two top mantissa
//   bits) is 4 log2 x to within a quarter octave, the division floors, and rowmax /
//   colmax are the largest finite |pred| of the scalar's row and column: a tensor of
//   rank >= 2 is a stack of matrices over its last two dimensions; a rank-1 tensor is
//   one row and one column. 92 = 4 * 23, so s4 ~ 4 log2(c * sqrt(rowmax colmax) /
//   ulp(pred)): an absolute error proportional to the geometric mean of the row's and
//   the column's scale (a delta-rule state S[i][j] grows with both v_i and k_j),
//   measured in the prediction's ulps; offset(tensor) (calibrated per tensor name, so
//   per kind and layer) is 4 log2 c.
//   Table = clamp(floor(s4 / 2), 0, 63) (half-octave buckets); table 64 when pred is
//   zero or subnormal, 65 when pred is NaN or Inf.
//
// Thread-safety: pure inline functions.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace kvstash::spec {

inline constexpr int kStateSpreadTables = 64;
inline constexpr int kStateZeroTable = 64;
inline constexpr int kStateNonFiniteTable = 65;
inline constexpr int kStateTables = 66;
inline constexpr int kStateTokenBits = 8;

// fp32 sign-magnitude -> offset binary: +0 -> 0x80000000, -0 -> 0x7FFFFFFF.
inline uint32_t Ordinal32(uint32_t b) { return (b & 0x80000000u) ? ~b : (b | 0x80000000u); }
inline uint32_t FromOrdinal32(uint32_t o) { return (o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o; }

// The residual's token and raw bits (count and value).
struct StateToken {
  uint8_t symbol = 0;
  uint8_t raw_count = 0;  // 0..29
  uint32_t raw = 0;       // the low raw_count bits of |r|
};

// r = Ordinal32(true) - Ordinal32(pred) mod 2^32.
inline StateToken TokenOfResidual(uint32_t r) {
  const bool neg = (r & 0x80000000u) != 0 && r != 0x80000000u;
  const uint32_t mag = neg ? (0u - r) : r;  // |r|; INT32_MIN stays 2^31 (positive)
  StateToken t;
  if (mag < 4) {
    t.symbol = static_cast<uint8_t>(mag);
  } else {
    const int k = 31 - std::countl_zero(mag);
    t.symbol = static_cast<uint8_t>(4 + 4 * (k - 2) + ((mag >> (k - 2)) & 3u));
    t.raw_count = static_cast<uint8_t>(k - 2);
    t.raw = mag & ((1u << (k - 2)) - 1u);
  }
  if (neg) t.symbol |= 0x80u;
  return t;
}

// Raw bits that follow `symbol`; -1 for a symbol no residual produces (M > 123, or a
// negative zero).
inline int RawCountOfSymbol(uint8_t symbol) {
  const int m = symbol & 0x7F;
  if (m > 123 || symbol == 0x80) return -1;
  return m < 4 ? 0 : (m - 4) / 4;
}

// The residual from a token and its raw bits. REQUIRES: RawCountOfSymbol(symbol) >= 0.
inline uint32_t ResidualOfToken(uint8_t symbol, uint32_t raw) {
  const uint32_t m = symbol & 0x7Fu;
  uint32_t mag = m;
  if (m >= 4) {
    const uint32_t k = (m - 4) / 4 + 2;
    mag = ((4u | ((m - 4) & 3u)) << (k - 2)) | raw;
  }
  return (symbol & 0x80u) ? 0u - mag : mag;
}

// Largest finite |x| of x[0], x[stride], ..., x[(n-1) stride], as the bits of |x|
// (0 when none is finite and nonzero).
inline uint32_t MaxAbsBits(const uint32_t* bits, uint64_t n, uint64_t stride) {
  uint32_t best = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t a = bits[i * stride] & 0x7FFFFFFFu;
    if (a < 0x7F800000u && a > best) best = a;
  }
  return best;
}

// 4 log2 of a positive finite float, to within a quarter octave: 4 E + m2.
inline int32_t Log2Quarter(uint32_t abs_bits) {
  return static_cast<int32_t>(4 * (abs_bits >> 23) + ((abs_bits >> 21) & 3u));
}

// scale4[i] = (L4(rowmax) + L4(colmax)) / 2 for every scalar of a tensor of `n`
// predicted scalars with shape `shape` (rank >= 1, product n; see the context rule).
inline void ScaleQuarterOctaves(const uint32_t* bits, uint64_t n, const uint64_t* shape,
                                size_t rank, int32_t* scale4) {
  const uint64_t cols = shape[rank - 1];
  if (rank == 1) {
    const int32_t l4 = Log2Quarter(MaxAbsBits(bits, n, 1));
    for (uint64_t i = 0; i < n; ++i) scale4[i] = l4;
    return;
  }
  const uint64_t rows = shape[rank - 2];
  const uint64_t mat = rows * cols;
  std::vector<int32_t> col_l4(cols);
  for (uint64_t m0 = 0; m0 + mat <= n; m0 += mat) {
    const uint32_t* x = bits + m0;
    for (uint64_t c = 0; c < cols; ++c) col_l4[c] = Log2Quarter(MaxAbsBits(x + c, rows, cols));
    for (uint64_t r = 0; r < rows; ++r) {
      const int32_t row_l4 = Log2Quarter(MaxAbsBits(x + r * cols, cols, 1));
      for (uint64_t c = 0; c < cols; ++c) scale4[m0 + r * cols + c] = (row_l4 + col_l4[c]) / 2;
    }
  }
}

// The table of a scalar whose prediction has bits `pred`, with ScaleQuarterOctaves
// `scale4`, in a tensor with calibrated offset `offset4` (quarter octaves).
inline int StateTableOf(uint32_t pred, int32_t scale4, int32_t offset4) {
  const uint32_t e_p = (pred >> 23) & 0xFFu;
  if (e_p == 0xFFu) return kStateNonFiniteTable;
  if (e_p == 0) return kStateZeroTable;
  const int32_t s4 = offset4 + scale4 - 4 * static_cast<int32_t>(e_p) + 92;
  const int32_t b = s4 >= 0 ? s4 / 2 : -((1 - s4) / 2);  // floor(s4 / 2)
  return b < 0 ? 0 : (b >= kStateSpreadTables ? kStateSpreadTables - 1 : b);
}

}  // namespace kvstash::spec
