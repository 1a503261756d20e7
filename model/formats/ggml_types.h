// ggml tensor element types as GGUF stores them, their block geometry, and
// dequantisation to fp32.
//
// READ ME FIRST
// - Type ids are ggml's (ggml.h `enum ggml_type`); a GGUF tensor's element type is
//   one of these. Only the types listed in GgmlType are supported; any other id is
//   NotSupported with its number.
// - A quantised type packs `BlockElems` values into `BlockBytes` bytes; a row's
//   length must be a multiple of BlockElems.
// - Dequantisation reproduces ggml's reference `dequantize_row_*` (ggml-quants.c)
//   operation by operation in fp32, so our weights equal what llama.cpp and gguf-py
//   (used by Hugging Face transformers' GGUF loader) compute, up to the order of
//   fp32 products noted per type.
//
// Block layouts (all little-endian, f16 = IEEE binary16):
//   Q8_0 (34 B / 32): f16 d, int8 q[32];             x = d * q
//   Q4_0 (18 B / 32): f16 d, u8 qs[16];              x[j] = d * ((qs[j] & 15) - 8),
//                                                    x[j+16] = d * ((qs[j] >> 4) - 8)
//   Q4_1 (20 B / 32): f16 d, f16 m, u8 qs[16];       x[j] = d * (qs[j] & 15) + m,
//                                                    x[j+16] = d * (qs[j] >> 4) + m
//   Q5_0 (22 B / 32): f16 d, u32 qh, u8 qs[16];      5-bit q[j] = (qs[j] & 15) | bit j of qh << 4,
//                                                    q[j+16] = (qs[j] >> 4) | bit j+16 of qh << 4;
//                                                    x = d * (q - 16)
//   Q5_1 (24 B / 32): f16 d, f16 m, u32 qh, u8 qs[16]; q as Q5_0; x = d * q + m
//   Q4_K (144 B / 256): f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale + 6-bit min),
//                       u8 qs[128]; sub-block s of 32: x = d*sc_s * q - dmin*m_s
//   Q5_K (176 B / 256): f16 d, f16 dmin, u8 scales[12] (as Q4_K), u8 qh[32], u8 qs[128];
//                       q = 4 low bits from qs + 16 * (high bit from qh); x as Q4_K
//   Q6_K (210 B / 256): u8 ql[128], u8 qh[64], int8 scales[16], f16 d;
//                       x = d * scales[s] * (q6 - 32), 16 sub-blocks of 16
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kvstash/result.h"

namespace kvstash::model {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// True when `raw` is a type id this build can dequantise.
bool IsSupportedGgmlType(uint32_t raw);
// "F32", "Q4_K", ...; "unknown" for other values.
std::string_view GgmlTypeName(GgmlType t);
// Elements per block (1 for F32/F16/BF16) and bytes per block.
uint32_t BlockElems(GgmlType t);
uint32_t BlockBytes(GgmlType t);
// Bytes of `n` elements. InvalidArgument unless n is a multiple of BlockElems(t).
Result<uint64_t> RowBytes(GgmlType t, uint64_t n);

// Dequantises out.size() elements from `in`. InvalidArgument unless out.size() is a
// multiple of BlockElems(t) and in.size() == RowBytes(t, out.size()).
Status Dequantize(GgmlType t, std::span<const uint8_t> in, std::span<float> out);

}  // namespace kvstash::model
