// Bit-exact comparison of float arrays for the equality tests (SIMD path against
// scalar, GPU against CPU): two arrays are the same when their lengths and every byte
// agree, so -0.0 differs from 0.0 and NaNs compare by payload.
#pragma once

#include <cstring>
#include <span>

namespace kvstash::testing {

// True when `a` and `b` have the same length and identical bits.
inline bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

}  // namespace kvstash::testing
