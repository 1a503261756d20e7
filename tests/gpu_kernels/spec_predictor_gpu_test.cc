// The CUDA spec predictor steps against the CPU predictor's functions, bit for bit, on
// random inputs with size sweeps (0, 1, odd sizes, group +-1): W8A16 quantiser
// (spec::QuantizeRowsInt16), int16 x int8 grouped GEMM (spec::Int16x8GemmGroupedNT,
// full-range operands so int32 group sums reach ~2^31), RMSNorm, RoPE and causal
// attention (the per-row functions of numerics/spec_predictor_ops.h that
// model::SpecPredictor runs on the CPU). Argument checks run without a device; the
// rest skips visibly when there is none (scripts/gpu_check.sh runs it on a GPU).
#include "gpu_kernels/spec_predictor_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "numerics/det_math.h"
#include "numerics/int8_gemm.h"
#include "numerics/quantize.h"
#include "numerics/spec_predictor_ops.h"
#include "tests/gpu_kernels/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::gpu {
namespace {

using testing::DeviceBuffer;

std::vector<float> RandomFloats(size_t n, float spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// Bitwise equality (NaN patterns included), with the first differing index.
void ExpectSameBits(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_EQ(Bits(gpu[i]), Bits(cpu[i])) << what << " differs at " << i << ": " << gpu[i]
                                          << " vs " << cpu[i];
  }
}

TEST(SpecPredictorGpu, QuantizeRowsInt16MatchesCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  for (const auto& [rows, cols, group] :
       {std::tuple{0, 5, 4}, std::tuple{1, 1, 1}, std::tuple{3, 127, 128}, std::tuple{5, 129, 128},
        std::tuple{7, 576, 128}, std::tuple{2, 300, 300}, std::tuple{4, 1000, 512}}) {
    std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * cols, 2.0f, 3 + cols);
    if (x.size() > 8) {  // specials: NaN -> 0, Inf never the amax, subnormal, a zero group
      x[1] = std::nanf("");
      x[2] = std::numeric_limits<float>::infinity();
      x[3] = -std::numeric_limits<float>::infinity();
      x[4] = FromBits(1);
    }
    spec::Int16Rows cpu;
    ASSERT_OK(spec::QuantizeRowsInt16(x, rows, cols, group, &cpu));
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<int16_t> d_q(x.size());
    DeviceBuffer<float> d_s(cpu.scales.size());
    ASSERT_OK(QuantizeRowsInt16Device(d_x.get(), rows, cols, group, d_q.get(), d_s.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_q.ToHost(), cpu.q) << rows << "x" << cols << " g" << group;
    ExpectSameBits(d_s.ToHost(), cpu.scales, "scales");
  }
}

TEST(SpecPredictorGpu, GroupedGemmMatchesCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  for (const auto& [m, n, k, group] :
       {std::tuple{0, 3, 8, 8}, std::tuple{1, 1, 1, 1}, std::tuple{3, 5, 130, 128},
        std::tuple{7, 9, 257, 128}, std::tuple{4, 33, 576, 64}, std::tuple{2, 17, 1024, 512},
        std::tuple{5, 3, 511, 512}, std::tuple{6, 11, 1537, 512}}) {
    std::uniform_int_distribution<int> ai(-32767, 32767), bi(-127, 127);
    const int groups = (k + group - 1) / group;
    std::vector<int16_t> a(static_cast<size_t>(m) * k);
    std::vector<int8_t> b(static_cast<size_t>(n) * k);
    for (auto& x : a) x = static_cast<int16_t>(ai(rng));
    for (auto& x : b) x = static_cast<int8_t>(bi(rng));
    // Saturated rows make the int32 group sums as large as allowed.
    if (m > 1) std::fill(a.begin(), a.begin() + k, int16_t{32767});
    if (n > 1) std::fill(b.begin(), b.begin() + k, int8_t{127});
    const std::vector<float> sa = RandomFloats(static_cast<size_t>(m) * groups, 1e-3f, 5);
    const std::vector<float> sb = RandomFloats(static_cast<size_t>(n) * groups, 1e-2f, 6);
    std::vector<float> cpu(static_cast<size_t>(m) * n);
    ASSERT_OK(spec::Int16x8GemmGroupedNT(a, sa, b, sb, cpu, m, n, k, group));
    DeviceBuffer<int16_t> d_a(a);
    DeviceBuffer<int8_t> d_b(b);
    DeviceBuffer<float> d_sa(sa), d_sb(sb), d_out(cpu.size());
    ASSERT_OK(Int16x8GemmGroupedDevice(d_a.get(), d_sa.get(), d_b.get(), d_sb.get(), d_out.get(),
                                       m, n, k, group, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ExpectSameBits(d_out.ToHost(), cpu, "gemm");
  }
}

TEST(SpecPredictorGpu, RmsNormMatchesCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  for (uint32_t n : {1u, 7u, 8u, 9u, 64u, 576u}) {
    const uint32_t rows = 13;
    std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * n, 3.0f, n);
    const std::vector<float> w = RandomFloats(n, 1.0f, n + 100);
    std::fill(x.begin(), x.begin() + n, 0.0f);  // a zero row: rsqrt(eps)
    std::vector<float> cpu = x;
    for (uint32_t r = 0; r < rows; ++r) model::RmsNormRow(cpu.data() + static_cast<size_t>(r) * n, n, w.data(), 1e-5f);
    DeviceBuffer<float> d_x(x), d_w(w);
    ASSERT_OK(RmsNormRowsDevice(d_x.get(), rows, n, d_w.get(), 1e-5f, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ExpectSameBits(d_x.ToHost(), cpu, "rmsnorm");
  }
}

TEST(SpecPredictorGpu, RopeMatchesCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  for (uint32_t hd : {2u, 64u, 128u}) {
    const uint32_t tokens = 9, heads = 3, half = hd / 2;
    std::vector<float> x = RandomFloats(static_cast<size_t>(tokens) * heads * hd, 2.0f, hd);
    std::vector<float> cs(static_cast<size_t>(tokens) * half), sn(cs.size());
    for (size_t i = 0; i < cs.size(); ++i) {
      cs[i] = static_cast<float>(std::cos(0.37 * static_cast<double>(i)));
      sn[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    }
    std::vector<float> cpu = x;
    for (uint32_t t = 0; t < tokens; ++t) {
      for (uint32_t h = 0; h < heads; ++h) {
        model::RopeRow(cpu.data() + (static_cast<size_t>(t) * heads + h) * hd,
                       &cs[static_cast<size_t>(t) * half], &sn[static_cast<size_t>(t) * half], half);
      }
    }
    DeviceBuffer<float> d_x(x), d_c(cs), d_s(sn);
    ASSERT_OK(RopeDevice(d_x.get(), tokens, heads, hd, d_c.get(), d_s.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ExpectSameBits(d_x.ToHost(), cpu, "rope");
  }
}

TEST(SpecPredictorGpu, CausalAttentionMatchesCpu) {
  KVSTASH_SKIP_WITHOUT_GPU();
  for (const auto& [first, rows, heads, kv_heads, hd] :
       {std::tuple{0u, 1u, 1u, 1u, 1u}, std::tuple{0u, 17u, 9u, 3u, 64u},
        std::tuple{31u, 5u, 4u, 2u, 9u}, std::tuple{100u, 3u, 2u, 2u, 64u}}) {
    const uint32_t keys = first + rows;
    const std::vector<float> q = RandomFloats(static_cast<size_t>(rows) * heads * hd, 1.5f, hd + 1);
    const std::vector<float> k = RandomFloats(static_cast<size_t>(keys) * kv_heads * hd, 1.5f, hd + 2);
    const std::vector<float> v = RandomFloats(k.size(), 1.0f, hd + 3);
    std::vector<float> cpu(q.size()), scratch(keys);
    const float scale = spec::DetRsqrt(static_cast<float>(hd));
    const size_t stride = static_cast<size_t>(kv_heads) * hd;
    for (uint32_t t = 0; t < rows; ++t) {
      for (uint32_t h = 0; h < heads; ++h) {
        const uint32_t g = h / (heads / kv_heads);
        const size_t at = (static_cast<size_t>(t) * heads + h) * hd;
        model::AttentionRow(q.data() + at, k.data() + g * hd, v.data() + g * hd, stride,
                            first + t + 1, hd, scale, scratch.data(), cpu.data() + at);
      }
    }
    DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_out(q.size());
    DeviceBuffer<float> d_scratch(static_cast<size_t>(rows) * heads * keys);
    ASSERT_OK(CausalAttentionDevice(d_q.get(), d_k.get(), d_v.get(), first, rows, heads, kv_heads,
                                    hd, d_scratch.get(), d_out.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ExpectSameBits(d_out.ToHost(), cpu, "attention");
  }
}

TEST(SpecPredictorGpuArgs, BadShapesAreInvalidArgumentWithoutTouchingTheDevice) {
  EXPECT_STATUS(QuantizeRowsInt16Device(nullptr, 1, 4, 0, nullptr, nullptr, nullptr), kInvalidArgument);
  EXPECT_STATUS(QuantizeRowsInt16Device(nullptr, -1, 4, 4, nullptr, nullptr, nullptr), kInvalidArgument);
  EXPECT_STATUS(Int16x8GemmGroupedDevice(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 8, 513, nullptr),
                kInvalidArgument);
  EXPECT_STATUS(Int16x8GemmGroupedDevice(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 8, 0, nullptr),
                kInvalidArgument);
  EXPECT_STATUS(RopeDevice(nullptr, 1, 1, 3, nullptr, nullptr, nullptr), kInvalidArgument);
  EXPECT_STATUS(CausalAttentionDevice(nullptr, nullptr, nullptr, 0, 1, 3, 2, 8, nullptr, nullptr, nullptr),
                kInvalidArgument);
  EXPECT_STATUS(CausalAttentionDevice(nullptr, nullptr, nullptr, 0, 1, 2, 0, 8, nullptr, nullptr, nullptr),
                kInvalidArgument);
  // Empty work launches nothing.
  EXPECT_OK(Int16x8GemmGroupedDevice(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 5, 8, 8, nullptr));
  EXPECT_OK(RmsNormRowsDevice(nullptr, 0, 8, nullptr, 1e-5f, nullptr));
}

}  // namespace
}  // namespace kvstash::gpu
