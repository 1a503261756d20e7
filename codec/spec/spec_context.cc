#include "codec/spec/spec_context.h"

#include <cmath>
#include <string>

#include "codec/spec/det_math.h"
#include "codec/spec/ordinal.h"

namespace kvstash::spec {
namespace {

uint32_t Clamp(int v, uint32_t n) {
  return v < 0 ? 0u : (static_cast<uint32_t>(v) >= n ? n - 1 : static_cast<uint32_t>(v));
}

// 2^-u for an ulp exponent u, or 0 when out of the exact range (f is then unused).
float InvUlp(int u) { return (u >= -126 && u <= 126) ? Pow2i(-u) : 0.0f; }

}  // namespace

Status ContextConfig::Validate() const {
  if (dtype != DType::kBF16 && dtype != DType::kFP8E4M3) {
    return Status::InvalidArgument("spec codes bf16 or fp8_e4m3 caches only");
  }
  if (buckets == 0 || frac_bins == 0 || !(step > 0.0f) || num_tables() > 65536) {
    return Status::InvalidArgument("spec context config: bad bucket layout");
  }
  return Status::Ok();
}

float ApproxLog2(float x) {
  const uint32_t b = Bits(x);
  const int e = static_cast<int>((b >> 23) & 0xFF) - 127;
  const float m = DMul(static_cast<float>(b & 0x7FFFFFu), 1.1920928955078125e-7f);  // 2^-23
  return DAdd(static_cast<float>(e), m);
}

Status ComputeContexts(const ContextConfig& cfg, std::span<const float> mu,
                       std::span<const float> log2_sigma, float fp8_scale,
                       std::span<uint16_t> pred_ordinal, std::span<uint16_t> table) {
  if (log2_sigma.empty() || mu.size() % log2_sigma.size() != 0 ||
      pred_ordinal.size() != mu.size() || table.size() != mu.size()) {
    return Status::InvalidArgument("spec contexts: span sizes disagree");
  }
  const bool fp8 = cfg.dtype == DType::kFP8E4M3;
  float log2_scale = 0.0f;
  if (fp8) {
    if (!std::isfinite(fp8_scale) || !(fp8_scale > 0.0f)) {
      return Status::InvalidArgument("spec contexts: fp8 scale must be finite and > 0");
    }
    log2_scale = ApproxLog2(fp8_scale);
  }
  const float inv_step = DDiv(1.0f, cfg.step);
  const auto nf = static_cast<float>(cfg.frac_bins);
  const size_t row = log2_sigma.size();
  for (size_t i = 0; i < mu.size(); ++i) {
    float m = mu[i];
    int u;
    float pv;
    if (fp8) {
      m = DDiv(m, fp8_scale);
      const uint8_t p = F32ToFp8E4M3(m);
      pred_ordinal[i] = Fp8Ordinal(p);
      u = Fp8UlpLog2(p);
      pv = Fp8E4M3ToF32(p);
    } else {
      const uint16_t p = F32ToBf16(m);
      pred_ordinal[i] = Bf16Ordinal(p);
      u = Bf16UlpLog2(p);
      pv = Bf16ToF32(p);
    }
    const float s = DSub(DSub(log2_sigma[i % row], log2_scale), static_cast<float>(u));
    const float sb = DMul(DSub(s, cfg.s_min), inv_step);
    const int bucket = (sb == sb) ? FloorToInt(sb < -1.0f ? -1.0f : (sb > 1e6f ? 1e6f : sb)) : 0;
    float f = DMul(DSub(m, pv), InvUlp(u));
    if (!(f == f) || f > 0.5f || f < -0.5f) f = 0.0f;  // NaN/Inf/saturated predictions
    const int bin = FloorToInt(DMul(DAdd(f, 0.5f), nf));
    table[i] = static_cast<uint16_t>(Clamp(bucket, cfg.buckets) * cfg.frac_bins +
                                     Clamp(bin, cfg.frac_bins));
  }
  return Status::Ok();
}

uint16_t ResidualSymbol(DType dtype, uint16_t true_bits, uint16_t pred_ordinal) {
  if (dtype == DType::kFP8E4M3) {
    return static_cast<uint8_t>(Fp8Ordinal(static_cast<uint8_t>(true_bits)) - pred_ordinal);
  }
  return static_cast<uint16_t>(Bf16Ordinal(true_bits) - pred_ordinal);
}

uint16_t ValueFromResidual(DType dtype, uint16_t symbol, uint16_t pred_ordinal) {
  if (dtype == DType::kFP8E4M3) {
    return Fp8FromOrdinal(static_cast<uint8_t>(pred_ordinal + symbol));
  }
  return Bf16FromOrdinal(static_cast<uint16_t>(pred_ordinal + symbol));
}

}  // namespace kvstash::spec
