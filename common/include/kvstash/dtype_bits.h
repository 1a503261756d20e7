// Scalar dtype conversions as inline functions compiled for both host and device.
//
// This is the single definition of the conversion algorithms documented in
// kvstash/dtype.h (round to nearest even; fp8 E4M3FN saturating, NaN kept with its
// sign). The CPU library and the CUDA kernels in gpu_kernels/ both compile this file,
// and the GPU tests compare the two builds bit for bit, which catches compiler or
// architecture differences (flush-to-zero, contraction, intrinsics) on either side.
// Only integer operations and exact float constructions appear here, plus one
// exactly-representable multiply in the fp8 subnormal path.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVSTASH_HD __host__ __device__
#else
#define KVSTASH_HD
#endif

namespace kvstash {

KVSTASH_HD inline uint32_t Bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
KVSTASH_HD inline float FromBits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds m >> shift to nearest, ties to even. REQUIRES: 1 <= shift <= 31.
KVSTASH_HD inline uint32_t ShiftRightRne(uint32_t m, int shift) {
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

KVSTASH_HD inline float Bf16ToF32(uint16_t bits) { return FromBits(static_cast<uint32_t>(bits) << 16); }

KVSTASH_HD inline uint16_t F32ToBf16(float value) {
  const uint32_t x = Bits(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: keep sign and top payload bits, force the quiet bit so it stays NaN.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

KVSTASH_HD inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return FromBits(sign | 0x7F800000u | (mant << 13));  // Inf / NaN
  if (exp != 0) return FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return FromBits(sign);  // +-0
  // Subnormal: mant * 2^-24. Normalise: shift until the implicit bit (0x400) is set.
  int e = 113;  // biased fp32 exponent of 2^-14
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return FromBits(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3FFu) << 13));
}

KVSTASH_HD inline uint16_t F32ToF16(float value) {
  uint32_t x = Bits(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x >= 0x7F800000u) {
    if (x == 0x7F800000u) return sign | 0x7C00u;
    return static_cast<uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));  // quiet NaN
  }
  if (x >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to Inf
  if (x < 0x38800000u) {                        // below 2^-14: subnormal or zero
    if (x < 0x33000000u) return sign;           // <= 2^-25 rounds (ties even) to 0
    const uint32_t e = x >> 23;
    const uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
    // value = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e).
    return static_cast<uint16_t>(sign | ShiftRightRne(m, static_cast<int>(126 - e)));
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t h = (x >> 13) - (112u << 10);
  const uint32_t rem = x & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

KVSTASH_HD inline float Fp8E4M3ToF32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xFu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xF && mant == 0x7) return FromBits(sign | 0x7FC00000u);  // NaN
  if (exp == 0) {
    // Subnormal: mant * 2^-9, exact in fp32.
    const float v = static_cast<float>(mant) * 0.001953125f;
    return (sign != 0) ? -v : v;
  }
  return FromBits(sign | ((exp + 120u) << 23) | (mant << 20));
}

KVSTASH_HD inline uint8_t F32ToFp8E4M3(float value) {
  uint32_t x = Bits(value);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return sign | 0x7Fu;   // NaN
  if (x >= 0x43E00000u) return sign | 0x7Eu;  // >= 448 (and Inf): saturate to 448
  const uint32_t e = x >> 23;
  if (e < 121) {               // below 2^-6: subnormal range, units of 2^-9
    if (e < 117) return sign;  // < 2^-10 rounds to 0 (2^-10 itself ties to even 0)
    const uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
    // value = m * 2^(e-150); in units of 2^-9 that is m >> (141 - e).
    return static_cast<uint8_t>(sign | ShiftRightRne(m, static_cast<int>(141 - e)));
  }
  uint32_t q = ((e - 120u) << 3) | ((x >> 20) & 0x7u);
  const uint32_t rem = x & 0xFFFFFu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  if (q > 0x7Eu) q = 0x7Eu;  // would be the NaN pattern: saturate
  return static_cast<uint8_t>(sign | q);
}

}  // namespace kvstash
