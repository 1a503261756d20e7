#include "codec/spec/spec_context.h"

#include <cmath>
#include <string>

#include "codec/spec/spec_context_simd.h"
#include "numerics/int8_gemm.h"  // CpuHasAvx2, CpuHasAvx512

namespace kvstash::spec {

Status ContextConfig::Validate() const {
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kFP8E4M3) {
    return Status::InvalidArgument("spec codes bf16, f16 or fp8_e4m3 caches only");
  }
  // The product in 64 bits: num_tables() is 32-bit and would wrap (65537 x 65536 = 65536).
  if (buckets == 0 || frac_bins == 0 || !(step > 0.0f) || static_cast<uint64_t>(buckets) * frac_bins > 65536) {
    return Status::InvalidArgument("spec context config: bad bucket layout");
  }
  return Status::Ok();
}

Status ComputeContexts(const ContextConfig& cfg, std::span<const float> mu,
                       std::span<const float> log2_sigma, float fp8_scale,
                       std::span<uint16_t> pred_ordinal, std::span<uint16_t> table) {
  if (log2_sigma.empty() || mu.size() % log2_sigma.size() != 0 ||
      pred_ordinal.size() != mu.size() || table.size() != mu.size()) {
    return Status::InvalidArgument("spec contexts: span sizes disagree");
  }
  const bool fp8 = cfg.dtype == DType::kFP8E4M3;
  if (fp8 && (!std::isfinite(fp8_scale) || !(fp8_scale > 0.0f))) {
    return Status::InvalidArgument("spec contexts: fp8 scale must be finite and > 0");
  }
  SpecContextParams p =
      MakeSpecContextParams(fp8, fp8_scale, cfg.s_min, cfg.step, cfg.buckets, cfg.frac_bins);
  p.f16 = cfg.dtype == DType::kF16;
  const size_t row = log2_sigma.size();
#if defined(__x86_64__)
  if (CpuHasAvx512()) {
    internal::ContextsAvx512(p, mu.data(), mu.size(), log2_sigma.data(), row, pred_ordinal.data(),
                             table.data());
    return Status::Ok();
  }
  if (CpuHasAvx2()) {
    internal::ContextsAvx2(p, mu.data(), mu.size(), log2_sigma.data(), row, pred_ordinal.data(),
                           table.data());
    return Status::Ok();
  }
#endif
  for (size_t base = 0; base < mu.size(); base += row) {
    for (size_t j = 0; j < row; ++j) {
      ScalarContext(p, mu[base + j], log2_sigma[j], &pred_ordinal[base + j], &table[base + j]);
    }
  }
  return Status::Ok();
}

uint16_t ResidualSymbol(DType dtype, uint16_t true_bits, uint16_t pred_ordinal) {
  return ResidualSymbolBits(dtype == DType::kFP8E4M3, true_bits, pred_ordinal);
}

uint16_t ValueFromResidual(DType dtype, uint16_t symbol, uint16_t pred_ordinal) {
  return ValueFromResidualBits(dtype == DType::kFP8E4M3, symbol, pred_ordinal);
}

}  // namespace kvstash::spec
