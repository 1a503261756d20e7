#include "gpu_kernels/spec_decode.h"

#include <algorithm>
#include <cmath>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/spec_decode.cuh"

namespace kvstash::gpu {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(uint64_t n) {
  return static_cast<unsigned>(std::min<uint64_t>((n + kThreads - 1) / kThreads, 65535));
}

Result<spec::SpecContextParams> Params(const spec::ContextConfig& cfg, float fp8_scale) {
  KVSTASH_RETURN_IF_ERROR(cfg.Validate());
  const bool fp8 = cfg.dtype == DType::kFP8E4M3;
  if (fp8 && (!std::isfinite(fp8_scale) || !(fp8_scale > 0.0f))) {
    return Status::InvalidArgument("spec contexts: fp8 scale must be finite and > 0");
  }
  spec::SpecContextParams p = spec::MakeSpecContextParams(fp8, fp8_scale, cfg.s_min, cfg.step,
                                                         cfg.buckets, cfg.frac_bins);
  p.f16 = cfg.dtype == DType::kF16;
  return p;
}

Status CheckShape(uint64_t n, uint32_t row) {
  if (row == 0 || n % row != 0) {
    return Status::InvalidArgument("spec GPU decode: n must be a multiple of a non-empty sigma row");
  }
  return Status::Ok();
}

}  // namespace

Status ComputeSpecContextsDevice(const spec::ContextConfig& cfg, const float* mu, uint64_t n,
                                 const float* log2_sigma, uint32_t row, float fp8_scale,
                                 uint16_t* pred_ordinal, uint16_t* table, cudaStream_t stream) {
  KVSTASH_ASSIGN_OR_RETURN(const spec::SpecContextParams p, Params(cfg, fp8_scale));
  KVSTASH_RETURN_IF_ERROR(CheckShape(n, row));
  if (n == 0) return Status::Ok();
  kernels::SpecContextsKernel<<<Blocks(n), kThreads, 0, stream>>>(p, mu, n, log2_sigma, row,
                                                                   pred_ordinal, table);
  return CudaStatus(cudaGetLastError(), "spec contexts kernel launch");
}

Status DecodeSpecTensorDevice(const spec::ContextConfig& cfg, const RansDeviceTablesView& tables,
                              const SpecTensorDecodeArgs& a, cudaStream_t stream) {
  const bool fp8 = cfg.dtype == DType::kFP8E4M3;
  if (a.num_symbols != a.n) {
    return Status::InvalidArgument("spec GPU decode: the stream's symbol count is not the tensor's");
  }
  if (a.segment_symbols == 0 ||
      a.num_segments != (a.n + a.segment_symbols - 1) / a.segment_symbols) {
    return Status::InvalidArgument("spec GPU decode: segment count does not cover n symbols");
  }
  if (!fp8 && reinterpret_cast<uintptr_t>(a.out) % 2 != 0) {
    return Status::InvalidArgument("spec GPU decode: bf16 output must be 2-byte aligned");
  }
  if (tables.num_tables != cfg.num_tables() || tables.symbol_bits != cfg.symbol_bits()) {
    return Status::InvalidArgument("spec GPU decode: tables do not match the context config");
  }
  KVSTASH_RETURN_IF_ERROR(ComputeSpecContextsDevice(cfg, a.mu, a.n, a.log2_sigma, a.row,
                                                    a.fp8_scale, a.pred_ordinal, a.table, stream));
  RansSegmentsLaunch l;
  l.framed = a.framed;
  l.offsets = a.offsets;
  l.num_segments = a.num_segments;
  l.segment_symbols = a.segment_symbols;
  l.num_symbols = a.num_symbols;
  l.table_index = a.table;
  l.status = a.segment_status;
  if (fp8) {
    KVSTASH_RETURN_IF_ERROR(RansDecodeSegmentsCuda(tables, l, a.out, stream));
  } else {
    KVSTASH_RETURN_IF_ERROR(
        RansDecodeSegmentsCuda(tables, l, reinterpret_cast<uint16_t*>(a.out), stream));
  }
  if (a.n == 0) return Status::Ok();
  if (fp8) {
    kernels::SpecRebuildKernel<uint8_t><<<Blocks(a.n), kThreads, 0, stream>>>(true, a.pred_ordinal, a.n, a.out);
  } else {
    kernels::SpecRebuildKernel<uint16_t><<<Blocks(a.n), kThreads, 0, stream>>>(
        false, a.pred_ordinal, a.n, reinterpret_cast<uint16_t*>(a.out));
  }
  return CudaStatus(cudaGetLastError(), "spec rebuild kernel launch");
}

}  // namespace kvstash::gpu
