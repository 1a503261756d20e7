// Operands of the packed-GEMM equality tests (int8_gemm_packed_{avx512,amx}_test.cc):
// random int16/int8 activations and int8 weights with per-group scales, optionally all
// at their type's limits (the int32 sums' worst case), and a bitwise float compare.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tests/support/same_bits.h"

namespace kvstash::spec::testing {

using ::kvstash::testing::SameBits;

struct Operands {
  std::vector<int16_t> a;      // [m, k]
  std::vector<float> a_scale;  // [m, groups]
  std::vector<int8_t> w;       // [n, k]
  std::vector<float> w_scale;  // [n, groups]
};

// Random operands; extreme = every value at the type's limit with random signs.
inline Operands MakeOperands(int m, int n, int k, int groups, int bits, bool extreme, uint32_t seed) {
  std::mt19937 rng(seed);
  const int amax = bits == 16 ? 32767 : 127;
  Operands o;
  o.a.resize(static_cast<size_t>(m) * k);
  o.w.resize(static_cast<size_t>(n) * k);
  for (auto& v : o.a) {
    v = static_cast<int16_t>(extreme ? (rng() % 2 ? amax : -amax)
                                     : static_cast<int>(rng() % (2 * amax + 1)) - amax);
  }
  for (auto& v : o.w) {
    v = static_cast<int8_t>(extreme ? (rng() % 2 ? 127 : -128) : static_cast<int>(rng() % 256) - 128);
  }
  std::uniform_real_distribution<float> d(1e-6f, 1e-2f);
  o.a_scale.resize(static_cast<size_t>(m) * groups);
  o.w_scale.resize(static_cast<size_t>(n) * groups);
  for (auto& s : o.a_scale) s = d(rng);
  for (auto& s : o.w_scale) s = d(rng);
  return o;
}

}  // namespace kvstash::spec::testing
