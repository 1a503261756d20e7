// Element types of KV caches and recurrent states, and their exact conversions.
//
// READ ME FIRST
// - Every conversion here is bit-exact and deterministic: the same input bits give the
//   same output bits on every machine. These functions are the CPU reference that
//   gpu_kernels/ reproduces bit for bit.
// - fp32 -> bf16 and fp32 -> fp16 round to nearest, ties to even (IEEE 754). NaN stays
//   NaN (quiet, sign kept); overflow becomes +-Inf, as IEEE rounding says.
// - fp8 is OCP "E4M3FN" (the format of vLLM/SGLang fp8 KV caches and of torch's
//   float8_e4m3fn): bias 7, no infinities, one NaN pattern per sign (S.1111.111), max
//   finite 448, min normal 2^-6, min subnormal 2^-9. fp32 -> e4m3 rounds to nearest
//   even and SATURATES: |x| > 448 and +-Inf become +-448 (as vLLM's scaled_fp8_quant
//   clamps before converting). NaN becomes NaN with its sign kept (0x7F / 0xFF);
//   note vLLM's clamp-by-fmaxf turns NaN into -448 instead: we keep NaN visible.
// - A scaled fp8 tensor holds q = e4m3(x / scale) and means x' = float(q) * scale, one
//   fp32 scale per (layer, K/V), as vLLM's fp8 KV cache.
//
// Thread-safety: all functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kvstash/dtype_bits.h"
#include "kvstash/result.h"

namespace kvstash {

// Stored element types. Values are part of the on-disk and wire formats: never
// renumber. fp32 = IEEE binary32, fp16 = IEEE binary16, bf16 = bfloat16,
// fp8_e4m3 = OCP E4M3FN (see above), u8 = raw bytes.
enum class DType : uint8_t {
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kFP8E4M3 = 4,
  kU8 = 5,
  kI32 = 6,
};

// Bytes per element; 0 for a value that is not a DType.
size_t DTypeSize(DType t);
// "f32", "f16", "bf16", "fp8_e4m3", "u8", "i32"; "invalid" otherwise.
std::string_view DTypeName(DType t);
// Inverse of DTypeName. InvalidArgument for an unknown name.
Result<DType> ParseDType(std::string_view name);
// True for a byte value that names a DType (used when parsing stored headers).
bool IsValidDType(uint8_t raw);

// Scalar conversions (bit patterns in, bit patterns out) are in kvstash/dtype_bits.h:
// Bf16ToF32, F32ToBf16, F16ToF32, F32ToF16, Fp8E4M3ToF32, F32ToFp8E4M3.

// Largest finite e4m3 value, 448.
inline constexpr float kFp8E4M3Max = 448.0f;

// Per-tensor scale as vLLM's dynamic fp8 quantisation picks it: amax / 448, where amax
// is the largest finite |x|; 1.0 when amax is 0 or no finite value exists.
float ComputeFp8Scale(std::span<const float> values);

// Array conversions. REQUIRES: in.size() == out.size(), else InvalidArgument (no write).
Status ConvertBf16ToF32(std::span<const uint16_t> in, std::span<float> out);
Status ConvertF32ToBf16(std::span<const float> in, std::span<uint16_t> out);
Status ConvertF16ToF32(std::span<const uint16_t> in, std::span<float> out);
Status ConvertF32ToF16(std::span<const float> in, std::span<uint16_t> out);
// q[i] = e4m3(in[i] / scale). REQUIRES: scale finite and > 0, else InvalidArgument.
Status QuantizeFp8E4M3(std::span<const float> in, float scale, std::span<uint8_t> out);
// out[i] = float(q[i]) * scale (one fp32 multiply, round to nearest).
Status DequantizeFp8E4M3(std::span<const uint8_t> in, float scale, std::span<float> out);

}  // namespace kvstash
