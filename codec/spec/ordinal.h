// The ordinal domain of a storage dtype, where spec codes residuals.
//
// READ ME FIRST
// - Ordinal(b) maps the bit pattern b of a bf16 or f16 (16 bits) or fp8 e4m3 (8 bits) value to
//   an integer that increases with the value: -max ... -0, +0 ... +max, with the NaN
//   patterns at the two ends. Neighbouring representable values differ by 1, so
//   "the true value is k steps above the prediction" is ordinal(true) -
//   ordinal(prediction), whatever the exponent.
// - The map is a bijection on all 2^w patterns (NaN, Inf, -0 included) and residuals
//   are taken modulo 2^w, so every cache, whatever its bits, is codable losslessly:
//   true = FromOrdinal((ordinal(pred) + residual) mod 2^w).
// - UlpLog2(b) is log2 of the spacing of representable values at b (the step a
//   residual of 1 means), used to express the predictor's spread sigma in steps.
//
// Thread-safety: pure inline functions, host and device.
#pragma once

#include <cstdint>

#include "kvstash/dtype_bits.h"

namespace kvstash::spec {

// bf16: sign-magnitude -> offset binary. +0 -> 0x8000, -0 -> 0x7FFF.
KVSTASH_HD inline uint16_t Bf16Ordinal(uint16_t b) {
  return (b & 0x8000u) ? static_cast<uint16_t>(~b) : static_cast<uint16_t>(b | 0x8000u);
}
KVSTASH_HD inline uint16_t Bf16FromOrdinal(uint16_t o) {
  return (o & 0x8000u) ? static_cast<uint16_t>(o & 0x7FFFu) : static_cast<uint16_t>(~o);
}
// log2 of the bf16 value spacing at b: exponent - 127 - 7 (subnormals: -133).
KVSTASH_HD inline int Bf16UlpLog2(uint16_t b) {
  const int e = (b >> 7) & 0xFF;
  return (e == 0 ? 1 : e) - 134;
}

// f16 (IEEE binary16): the same sign-magnitude -> offset binary map as bf16 (both have
// the sign in bit 15 and order their other 15 bits by magnitude). +0 -> 0x8000,
// -0 -> 0x7FFF, the NaN patterns beyond +-Inf at the two ends.
KVSTASH_HD inline uint16_t F16Ordinal(uint16_t b) { return Bf16Ordinal(b); }
KVSTASH_HD inline uint16_t F16FromOrdinal(uint16_t o) { return Bf16FromOrdinal(o); }
// log2 of the f16 value spacing at b: exponent - 15 - 10 (subnormals: -24).
KVSTASH_HD inline int F16UlpLog2(uint16_t b) {
  const int e = (b >> 10) & 0x1F;
  return (e == 0 ? 1 : e) - 25;
}

// fp8 e4m3fn: same construction on 8 bits. +0 -> 0x80, -0 -> 0x7F.
KVSTASH_HD inline uint8_t Fp8Ordinal(uint8_t b) {
  return (b & 0x80u) ? static_cast<uint8_t>(~b) : static_cast<uint8_t>(b | 0x80u);
}
KVSTASH_HD inline uint8_t Fp8FromOrdinal(uint8_t o) {
  return (o & 0x80u) ? static_cast<uint8_t>(o & 0x7Fu) : static_cast<uint8_t>(~o);
}
// log2 of the e4m3 spacing at b (before the per-tensor scale): exponent - 7 - 3
// (subnormals: -9).
KVSTASH_HD inline int Fp8UlpLog2(uint8_t b) {
  const int e = (b >> 3) & 0xF;
  return (e == 0 ? 1 : e) - 10;
}

}  // namespace kvstash::spec
