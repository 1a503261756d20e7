#include "kvstash/dtype.h"

#include <cmath>
#include <string>

namespace kvstash {
namespace {

template <typename In, typename Out, typename Fn>
Status ConvertArray(std::span<const In> in, std::span<Out> out, Fn fn) {
  if (in.size() != out.size()) {
    return Status::InvalidArgument("conversion: input has " + std::to_string(in.size()) +
                                   " elements, output " + std::to_string(out.size()));
  }
  for (size_t i = 0; i < in.size(); ++i) out[i] = fn(in[i]);
  return Status::Ok();
}

}  // namespace

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kFP8E4M3: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
  }
  return "invalid";
}

Result<DType> ParseDType(std::string_view name) {
  for (uint8_t raw = 1; raw <= 6; ++raw) {
    const auto t = static_cast<DType>(raw);
    if (DTypeName(t) == name) return t;
  }
  if (name == "fp8" || name == "e4m3") return DType::kFP8E4M3;
  if (name == "fp32" || name == "float32") return DType::kF32;
  if (name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bfloat16") return DType::kBF16;
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (expected f32, f16, bf16, fp8_e4m3, u8, i32)");
}

bool IsValidDType(uint8_t raw) { return raw >= 1 && raw <= 6; }

float ComputeFp8Scale(std::span<const float> values) {
  float amax = 0.0f;
  for (float v : values) {
    if (std::isfinite(v)) amax = std::fmax(amax, std::fabs(v));
  }
  if (amax == 0.0f) return 1.0f;
  return amax / kFp8E4M3Max;
}

Status ConvertBf16ToF32(std::span<const uint16_t> in, std::span<float> out) {
  return ConvertArray(in, out, Bf16ToF32);
}
Status ConvertF32ToBf16(std::span<const float> in, std::span<uint16_t> out) {
  return ConvertArray(in, out, F32ToBf16);
}
Status ConvertF16ToF32(std::span<const uint16_t> in, std::span<float> out) {
  return ConvertArray(in, out, F16ToF32);
}
Status ConvertF32ToF16(std::span<const float> in, std::span<uint16_t> out) {
  return ConvertArray(in, out, F32ToF16);
}

Status QuantizeFp8E4M3(std::span<const float> in, float scale, std::span<uint8_t> out) {
  if (!std::isfinite(scale) || !(scale > 0.0f)) {
    return Status::InvalidArgument("fp8 scale must be finite and > 0");
  }
  return ConvertArray(in, out, [scale](float v) { return F32ToFp8E4M3(v / scale); });
}

Status DequantizeFp8E4M3(std::span<const uint8_t> in, float scale, std::span<float> out) {
  if (!std::isfinite(scale) || !(scale > 0.0f)) {
    return Status::InvalidArgument("fp8 scale must be finite and > 0");
  }
  return ConvertArray(in, out, [scale](uint8_t q) { return Fp8E4M3ToF32(q) * scale; });
}

}  // namespace kvstash
