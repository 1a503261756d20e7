// The ggml-q4_1 predictor's AVX2 attention helpers (model/predictor/ggml_attention_avx2.h)
// against the scalar reference: the f16 / bf16 rounding vs F32ToF16 / F32ToBf16 on
// special values and random bit patterns, bit for bit. Prints SKIPPED without AVX2 (CPU
// or KVSTASH_CPU_PATH).
#include "model/predictor/ggml_attention_avx2.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "kvstash/dtype_bits.h"
#include "numerics/int8_gemm.h"

namespace kvstash::model::ggml {
namespace {

#if defined(__x86_64__)
TEST(GgmlAttentionAvx2Test, RoundToDTypeGivesTheScalarBits) {
  if (!spec::CpuHasAvx2()) GTEST_SKIP() << "SKIPPED: no AVX2 (CPU or KVSTASH_CPU_PATH)";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e6f,
                          -1e6f,
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          FromBits(0xFFC12345u),
                          FromBits(0x7F812345u),
                          6.1e-5f,
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          1e-40f,
                          1.00048828125f,
                          1.000244140625f,
                          FromBits(0x3F808000u),
                          FromBits(0x3F818000u),
                          FromBits(0x7F7FFFFFu)};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 4000; ++i) x.push_back(FromBits(bits(rng)));
  for (DType dt : {DType::kF16, DType::kBF16}) {
    std::vector<float> y(x.size());
    avx2::RoundToDType(x.data(), y.data(), x.size(), dt);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = dt == DType::kBF16 ? Bf16ToF32(F32ToBf16(x[i])) : F16ToF32(F32ToF16(x[i]));
      ASSERT_EQ(Bits(y[i]), Bits(want))
          << DTypeName(dt) << " at " << i << " x bits " << std::hex << Bits(x[i]);
    }
  }
}
#endif

}  // namespace
}  // namespace kvstash::model::ggml
