// Inputs for testing an elementwise float kernel against its scalar definition:
// every 4099th bit pattern over the whole fp32 range (both signs, subnormals, Inf and
// NaN encodings), the boundaries of exp's finite range and the specials, then 100,000
// uniform values in [-100, 100] (fixed seed). About 1.15 M floats.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kvstash/dtype_bits.h"

namespace kvstash::testing {

inline std::vector<float> FloatSweepInputs() {
  std::vector<float> v;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4099) v.push_back(FromBits(static_cast<uint32_t>(b)));
  for (float f : {0.0f, -0.0f, 88.72283935546875f, 88.7228469848632812f, -87.33654022216796875f,
                  -87.3365478515625f, 1e-40f, -1e-40f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    v.push_back(f);
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-100.0f, 100.0f);
  for (int i = 0; i < 100000; ++i) v.push_back(d(rng));
  return v;
}

}  // namespace kvstash::testing
