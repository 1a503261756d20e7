// The CUDA rANS decoder against the CPU reference: identical symbols for every
// precision, alphabet, table selection and size sweep; Corruption for truncated and
// damaged segments. Skips (visibly) without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codec/entropy/pmf.h"
#include "codec/entropy/rans_segments.h"
#include "codec/entropy/table_builder.h"
#include "gpu_kernels/rans_decode.h"
#include "tests/codec/entropy/rans_test_util.h"
#include "tests/gpu_kernels/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::gpu {
namespace {

using entropy::TableSet;

using testing::DeviceBuffer;

// Decodes `framed` on the GPU; returns the per-segment verdict as a Status and the
// symbols in *out.
template <typename OutT>
Status GpuDecode(const std::vector<uint8_t>& framed, const std::vector<uint16_t>& idx,
                 const TableSet& tables, size_t n, std::vector<OutT>* out) {
  KVSTASH_ASSIGN_OR_RETURN(entropy::SegmentDirectory dir, entropy::ParseSegmentDirectory(framed));
  KVSTASH_ASSIGN_OR_RETURN(DeviceRansTables dt, DeviceRansTables::Upload(tables, nullptr));
  DeviceBuffer<uint8_t> d_framed(framed);
  DeviceBuffer<uint64_t> d_offsets(dir.offsets);
  DeviceBuffer<uint16_t> d_idx(idx);
  DeviceBuffer<uint8_t> d_status(dir.num_segments());
  DeviceBuffer<OutT> d_out(n);
  RansSegmentsLaunch l;
  l.framed = d_framed.get();
  l.offsets = d_offsets.get();
  l.num_segments = dir.num_segments();
  l.segment_symbols = dir.segment_symbols;
  l.num_symbols = dir.num_symbols;
  l.table_index = idx.empty() ? nullptr : d_idx.get();
  l.status = d_status.get();
  KVSTASH_RETURN_IF_ERROR(RansDecodeSegmentsCuda(dt.view(), l, d_out.get(), nullptr));
  if (cudaDeviceSynchronize() != cudaSuccess) return Status::Internal("kernel failed");
  *out = d_out.ToHost();
  const std::vector<uint8_t> status = d_status.ToHost();
  return RansSegmentStatusToStatus(status);
}

TEST(RansGpu, MatchesCpuReferenceOverConfigurations) {
  KVSTASH_SKIP_WITHOUT_GPU();
  for (int precision : {10, 11, 12, 15}) {
    for (int bits : {1, 8, 12, 16}) {
      const TableSet tables = entropy::testing::LaplaceTables(precision, bits, 5);
      auto pmf = entropy::LaplacePmf(bits, entropy::SymbolMapping::kTwosComplement, 0.0, 5.0).value();
      for (double& q : pmf) q += 1e-4;  // escapes
      for (size_t n : {0, 1, 31, 32, 33, 4095, 4096, 4097, 100000}) {
        SCOPED_TRACE(::testing::Message() << "P " << precision << " bits " << bits << " n " << n);
        const auto symbols = entropy::testing::Sample(pmf, n, n + bits);
        std::vector<uint16_t> idx(n);
        std::mt19937_64 rng(n);
        for (auto& t : idx) t = static_cast<uint16_t>(rng() % 5);
        std::vector<uint8_t> framed;
        ASSERT_OK(entropy::RansEncodeSegmentedAppend(symbols, idx, tables, 4096, &framed));
        std::vector<uint16_t> cpu(n);
        ASSERT_OK(entropy::RansDecodeSegmented(framed, idx, tables, cpu));
        std::vector<uint16_t> gpu;
        ASSERT_OK(GpuDecode(framed, idx, tables, n, &gpu));
        ASSERT_EQ(gpu, cpu);
        ASSERT_EQ(gpu, symbols);
        if (bits <= 8) {
          std::vector<uint8_t> gpu8;
          ASSERT_OK(GpuDecode(framed, idx, tables, n, &gpu8));
          ASSERT_EQ(gpu8, std::vector<uint8_t>(symbols.begin(), symbols.end()));
        }
      }
    }
  }
}

TEST(RansGpu, LargeTablesFallBackToGlobalMemory) {
  KVSTASH_SKIP_WITHOUT_GPU();
  // 40 tables at P = 15: 7.5 MiB of lookup arrays, far beyond shared memory.
  const TableSet tables = entropy::testing::LaplaceTables(15, 16, 40);
  auto pmf = entropy::GaussianPmf(16, entropy::SymbolMapping::kTwosComplement, 0.0, 200.0).value();
  const auto symbols = entropy::testing::Sample(pmf, 50000, 9);
  std::vector<uint16_t> idx(symbols.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint16_t>(i % 40);
  std::vector<uint8_t> framed;
  ASSERT_OK(entropy::RansEncodeSegmentedAppend(symbols, idx, tables, 1024, &framed));
  std::vector<uint16_t> gpu;
  ASSERT_OK(GpuDecode(framed, idx, tables, symbols.size(), &gpu));
  EXPECT_EQ(gpu, symbols);
}

TEST(RansGpu, DamagedSegmentsAreCorruptionLikeTheCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  const TableSet tables = entropy::testing::LaplaceTables(12, 8, 2);
  auto pmf = entropy::LaplacePmf(8, entropy::SymbolMapping::kTwosComplement, 0.0, 3.0).value();
  const auto symbols = entropy::testing::Sample(pmf, 3000, 4);
  std::vector<uint8_t> framed;
  ASSERT_OK(entropy::RansEncodeSegmentedAppend(symbols, {}, tables, 1024, &framed));
  std::mt19937_64 rng(8);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> bad = framed;
    const size_t header = 16 + 4 * 3;
    bad[header + rng() % (bad.size() - header)] ^= static_cast<uint8_t>(1u << (rng() % 8));
    std::vector<uint16_t> cpu(symbols.size()), gpu;
    const Status c = entropy::RansDecodeSegmented(bad, {}, tables, cpu);
    const Status g = GpuDecode(bad, {}, tables, symbols.size(), &gpu);
    ASSERT_EQ(c.ok(), g.ok()) << c.ToString() << " vs " << g.ToString();
    if (c.ok()) {
      EXPECT_EQ(cpu, gpu);
    }
  }
}

}  // namespace
}  // namespace kvstash::gpu
