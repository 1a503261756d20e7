// Instantiations and host side of the CUDA rANS decoder (rans_decode.h).
#include <string>
#include <vector>

#include "gpu_kernels/rans_decode.cuh"

namespace kvstash::gpu {
namespace {

constexpr int kWarpsPerBlock = 4;
// Shared memory a block may use for tables without an opt-in (48 KiB on every part).
constexpr size_t kDefaultSharedBytes = 48 * 1024;
// Opt-in maximum used for larger table sets (sm_80: 163 KiB; sm_90: 227 KiB).
constexpr size_t kOptInSharedBytes = 160 * 1024;

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

template <typename OutT>
Status Launch(const RansDeviceTablesView& tables, const RansSegmentsLaunch& launch, OutT* out,
              cudaStream_t stream) {
  if (sizeof(OutT) == 1 && tables.symbol_bits > 8) {
    return Status::InvalidArgument("rANS CUDA: 8-bit output for a wider alphabet");
  }
  if (launch.segment_symbols == 0 || launch.segment_symbols % 32 != 0) {
    return Status::InvalidArgument("rANS CUDA: segment_symbols must be a positive multiple of 32");
  }
  if (launch.num_segments == 0) return Status::Ok();
  internal::RansKernelParams params{tables, launch};
  const dim3 block(32 * kWarpsPerBlock);
  const dim3 grid((launch.num_segments + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const size_t shared = (size_t{tables.num_tables} << tables.precision) * 6;
  if (shared <= kDefaultSharedBytes) {
    internal::RansDecodeSegmentsKernel<OutT, true><<<grid, block, shared, stream>>>(params, out);
  } else if (shared <= kOptInSharedBytes &&
             cudaFuncSetAttribute(internal::RansDecodeSegmentsKernel<OutT, true>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared)) == cudaSuccess) {
    internal::RansDecodeSegmentsKernel<OutT, true><<<grid, block, shared, stream>>>(params, out);
  } else {
    (void)cudaGetLastError();  // clear a refused opt-in
    internal::RansDecodeSegmentsKernel<OutT, false><<<grid, block, 0, stream>>>(params, out);
  }
  return CudaStatus(cudaGetLastError(), "rANS decode launch");
}

}  // namespace

Result<DeviceRansTables> DeviceRansTables::Upload(const entropy::TableSet& tables,
                                                  cudaStream_t stream) {
  const size_t slots = tables.num_slots();
  std::vector<uint32_t> ranges;
  for (size_t t = 0; t < tables.size(); ++t) {
    ranges.push_back(tables.table(t).first_symbol());
    ranges.push_back(tables.table(t).num_direct());
  }
  const size_t entries_bytes = slots * 4;
  const size_t ranges_bytes = ranges.size() * 4;
  const size_t symbols_bytes = slots * 2;
  DeviceRansTables d;
  KVSTASH_RETURN_IF_ERROR(CudaStatus(
      cudaMalloc(&d.memory_, entries_bytes + ranges_bytes + symbols_bytes), "malloc tables"));
  auto* base = static_cast<uint8_t*>(d.memory_);
  KVSTASH_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(base, tables.decode_entries(), entries_bytes, cudaMemcpyHostToDevice, stream),
      "copy entries"));
  KVSTASH_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(base + entries_bytes, ranges.data(), ranges_bytes, cudaMemcpyHostToDevice,
                      stream),
      "copy ranges"));
  KVSTASH_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(base + entries_bytes + ranges_bytes, tables.decode_symbols(), symbols_bytes,
                      cudaMemcpyHostToDevice, stream),
      "copy symbols"));
  KVSTASH_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "upload tables"));
  d.view_.entries = reinterpret_cast<const uint32_t*>(base);
  d.view_.ranges = reinterpret_cast<const uint32_t*>(base + entries_bytes);
  d.view_.symbols = reinterpret_cast<const uint16_t*>(base + entries_bytes + ranges_bytes);
  d.view_.num_tables = static_cast<uint32_t>(tables.size());
  d.view_.precision = tables.precision();
  d.view_.symbol_bits = tables.symbol_bits();
  return d;
}

DeviceRansTables::DeviceRansTables(DeviceRansTables&& other) noexcept
    : memory_(other.memory_), view_(other.view_) {
  other.memory_ = nullptr;
}

DeviceRansTables& DeviceRansTables::operator=(DeviceRansTables&& other) noexcept {
  if (this != &other) {
    Release();
    memory_ = other.memory_;
    view_ = other.view_;
    other.memory_ = nullptr;
  }
  return *this;
}

DeviceRansTables::~DeviceRansTables() { Release(); }

void DeviceRansTables::Release() {
  if (memory_ != nullptr) (void)cudaFree(memory_);
  memory_ = nullptr;
}

Status RansDecodeSegmentsCuda(const RansDeviceTablesView& tables, const RansSegmentsLaunch& launch,
                              uint16_t* d_out, cudaStream_t stream) {
  return Launch(tables, launch, d_out, stream);
}
Status RansDecodeSegmentsCuda(const RansDeviceTablesView& tables, const RansSegmentsLaunch& launch,
                              uint8_t* d_out, cudaStream_t stream) {
  return Launch(tables, launch, d_out, stream);
}

Status RansSegmentStatusToStatus(std::span<const uint8_t> status) {
  static const char* const kNames[] = {"ok", "bad segment size", "initial state below 2^16",
                                       "stream truncated", "trailing words after the last symbol",
                                       "final state mismatch",
                                       "escaped value inside the table's direct range",
                                       "table index out of range"};
  for (size_t s = 0; s < status.size(); ++s) {
    if (status[s] == 0) continue;
    const char* what = status[s] < std::size(kNames) ? kNames[status[s]] : "unknown status";
    return Status::Corruption("rANS CUDA: segment " + std::to_string(s) + ": " + what);
  }
  return Status::Ok();
}

}  // namespace kvstash::gpu
