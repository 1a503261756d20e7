// Golden digests of the spec predictor's output on real SmolLM2-135M text.
//
// Every stored spec payload depends on the predictor's exact bits (a decoder whose
// predictor differs returns Mismatch), so any speed work on model/predictor/spec_predictor* or
// numerics/ (int8_gemm*, quantize*, spec_predictor_ops.h) must leave these digests unchanged. They were
// recorded with the first predictor (simple int GEMM, per-row attention) before any
// optimisation: XXH3-64 over, for each layer in order, the K bytes then the V bytes
// (fp32 little-endian, [tokens, n_kv_heads, head_dim]) of the first 600 (and 1,536) tokens of the
// GNU GPL v3 as Debian ships it (/usr/share/common-licenses/GPL-3, base-files).
// The predictor has no logits (it stops after the last layer's K/V), so K/V is all
// of its output.
//
// If a digest changes, the change broke compatibility with every stored spec payload:
// fix the code, do not update the digest (unless the format version changes too).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/checksum.h"
#include "model/formats/model_loader.h"
#include "model/predictor/spec_predictor.h"
#include "tests/support/test_util.h"

namespace kvstash::model {
namespace {

constexpr size_t kGoldenTokens = 600;
constexpr size_t kLongTokens = 1536;  // a long prefix: attention over > 1,024 keys

class PredictorGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path) || !std::filesystem::exists("/usr/share/common-licenses/GPL-3")) {
      return;
    }
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    std::ifstream f("/usr/share/common-licenses/GPL-3");
    std::stringstream ss;
    ss << f.rdbuf();
    auto toks = model_->tokenizer->Encode(ss.str());
    ASSERT_TRUE(toks.ok());
    ASSERT_GE(toks->size(), kLongTokens);
    tokens_ = new std::vector<uint32_t>(toks->begin(), toks->begin() + kLongTokens);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokens_;
    model_ = nullptr;
    tokens_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) {
      GTEST_SKIP() << "models/SmolLM2-135M-Instruct.Q4_1.gguf or GPL-3 text absent: run scripts/setup.sh";
    }
  }

  // Runs the first `n` golden tokens split at `splits` and returns the K/V digest.
  static uint64_t RunDigest(const SpecPredictorOptions& o, std::vector<size_t> splits = {},
                            size_t n = kGoldenTokens) {
    auto p = SpecPredictor::Create(*model_, o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return 0;
    PredictorCache cache;
    size_t at = 0;
    splits.push_back(n);
    for (size_t end : splits) {
      const Status s = (*p)->Run(std::span(*tokens_).subspan(at, end - at), &cache);
      EXPECT_TRUE(s.ok()) << s.ToString();
      at = end;
    }
    EXPECT_EQ(cache.tokens, n);
    return PredictorCacheDigest(cache);
  }

  static inline Model* model_ = nullptr;
  static inline std::vector<uint32_t>* tokens_ = nullptr;
};

SpecPredictorOptions Variant(int group, int activation_bits) {
  SpecPredictorOptions o;
  o.group = group;
  o.activation_bits = activation_bits;
  return o;
}

// The default predictor (W8A16-g128): the one every stored spec payload uses unless
// bench/calibrate were given other options. Checked with the default backend and one
// thread, with two threads and a batch split, and with the portable scalar backend.
TEST_F(PredictorGoldenTest, W8A16G128) {
  constexpr uint64_t kGolden = 0xb2cb75036f09c9cdull;
  EXPECT_EQ(RunDigest(Variant(128, 16)), kGolden) << std::hex << "default backend, 1 thread";
  SpecPredictorOptions two = Variant(128, 16);
  two.threads = 2;
  EXPECT_EQ(RunDigest(two, {1, 257, 258}), kGolden) << std::hex << "2 threads, splits 1/257/258";
  SpecPredictorOptions scalar = Variant(128, 16);
  scalar.backend = spec::GemmBackend::kScalar;  // the portable reference path (slowest run here)
  scalar.threads = 2;
  EXPECT_EQ(RunDigest(scalar, {300}), kGolden) << std::hex << "scalar backend, 2 threads, split 300";
}

// The same digests with each SIMD backend forced (spec::GemmBackend: kAvx2 never runs
// AVX-512 code, kAvx512 runs the AVX-512 GEMM, attention and SiLU, kAmx the AMX tile
// GEMM and the AVX-512 rest), 1 and 2 threads, one batch and a split; each prints
// SKIPPED on a CPU without its instructions.
void CheckBackend(spec::GemmBackend backend, uint64_t golden, uint64_t golden_long,
                  uint64_t (*run)(const SpecPredictorOptions&, std::vector<size_t>, size_t)) {
  SpecPredictorOptions o = Variant(128, 16);
  o.backend = backend;
  EXPECT_EQ(run(o, {}, kGoldenTokens), golden) << std::hex << "1 thread";
  o.threads = 2;
  EXPECT_EQ(run(o, {1, 257, 258}, kGoldenTokens), golden) << std::hex << "2 threads, splits 1/257/258";
  EXPECT_EQ(run(o, {}, kLongTokens), golden_long) << std::hex << "2 threads, 1,536 tokens";
  o.threads = 1;
  EXPECT_EQ(run(o, {700}, kLongTokens), golden_long) << std::hex << "1 thread, 1,536 tokens, split 700";
}

TEST_F(PredictorGoldenTest, W8A16G128Avx2Backend) {
  if (!spec::CpuHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2 (or KVSTASH_CPU_PATH=scalar)";
  CheckBackend(spec::GemmBackend::kAvx2, 0xb2cb75036f09c9cdull, 0x169576bd5378a8fbull, RunDigest);
}

TEST_F(PredictorGoldenTest, W8A16G128Avx512Backend) {
  if (!spec::CpuHasAvx512()) {
    GTEST_SKIP() << "this CPU has no AVX-512 F/BW/DQ/VL/VNNI (or KVSTASH_CPU_PATH forbids it)";
  }
  CheckBackend(spec::GemmBackend::kAvx512, 0xb2cb75036f09c9cdull, 0x169576bd5378a8fbull, RunDigest);
}

TEST_F(PredictorGoldenTest, W8A16G128AmxBackend) {
  if (!spec::CpuHasAmx()) {
    GTEST_SKIP() << "this CPU has no AMX-TILE/AMX-INT8 with AVX-512 (or KVSTASH_CPU_PATH is not auto)";
  }
  CheckBackend(spec::GemmBackend::kAmx, 0xb2cb75036f09c9cdull, 0x169576bd5378a8fbull, RunDigest);
}

// The default predictor over a long prompt (the demo's RAG documents are >= 1,500
// tokens), one batch and two threads.
TEST_F(PredictorGoldenTest, W8A16G128LongPrompt) {
  constexpr uint64_t kGolden = 0x169576bd5378a8fbull;
  SpecPredictorOptions two = Variant(128, 16);
  two.threads = 2;
  EXPECT_EQ(RunDigest(two, {}, kLongTokens), kGolden) << std::hex << "1,536 tokens";
}

// The int8-attention variant (w8a16-g128-attn8, spec_predictor_int_attention.cc),
// recorded with its first implementation from the portable scalar backend: every
// backend this CPU has, 1 and 2 threads, one batch and splits (across key blocks of 128
// and within one), the short and the long prompt.
TEST_F(PredictorGoldenTest, W8A16G128Attn8) {
  constexpr uint64_t kGolden = 0xe612583339a3c582ull, kGoldenLong = 0x74b1214acf804aaeull;
  SpecPredictorOptions o = Variant(128, 16);
  o.attention = SpecPredictorOptions::Attention::kInt8;
  o.backend = spec::GemmBackend::kScalar;
  o.threads = 2;
  EXPECT_EQ(RunDigest(o), kGolden) << std::hex << "scalar backend";
  std::vector<spec::GemmBackend> backends = {spec::GemmBackend::kAuto};
  if (spec::CpuHasAvx2()) backends.push_back(spec::GemmBackend::kAvx2);
  if (spec::CpuHasAvx512()) backends.push_back(spec::GemmBackend::kAvx512);
  if (spec::CpuHasAmx()) backends.push_back(spec::GemmBackend::kAmx);
  for (spec::GemmBackend backend : backends) {
    o.backend = backend;
    o.threads = 1;
    EXPECT_EQ(RunDigest(o), kGolden) << std::hex << "backend " << static_cast<int>(backend) << ", 1 thread";
    o.threads = 2;
    EXPECT_EQ(RunDigest(o, {1, 127, 300}), kGolden)
        << std::hex << "backend " << static_cast<int>(backend) << ", 2 threads, splits 1/127/300";
    EXPECT_EQ(RunDigest(o, {700}, kLongTokens), kGoldenLong)
        << std::hex << "backend " << static_cast<int>(backend) << ", 1,536 tokens, split 700";
  }
}

// The other variants `kvstash-bench codec` / `calibrate spec` accept
// (--predictor-group, --predictor-activation-bits) that issue 9 compared.
TEST_F(PredictorGoldenTest, OtherVariants) {
  struct Case {
    int group, bits;
    uint64_t golden;
  };
  const Case cases[] = {
      {32, 16, 0x90cd55e7ebc57b48ull},  // w8a16-g32
      {0, 8, 0x010d951c30e11e7aull},    // w8a8 (per output channel / per token)
      {32, 8, 0x66e7922afb8bf821ull},   // w8a8-g32
  };
  for (const Case& c : cases) {
    SpecPredictorOptions o = Variant(c.group, c.bits);
    o.threads = 2;
    EXPECT_EQ(RunDigest(o), c.golden) << std::hex << o.VariantName();
  }
}

// The ggml-q4_1 variants (llama.cpp's CPU arithmetic over the GGUF's Q4_1 blocks),
// on the first 96 golden tokens (scalar code: slower than the int variants), recorded
// with the first implementation: one thread in one batch, and two threads with a batch
// split, give the same digest.
TEST_F(PredictorGoldenTest, GgmlQ4_1) {
  constexpr size_t kTokens = 96;
  struct Case {
    DType kv_dtype;
    uint64_t golden;
  };
  const Case cases[] = {
      {DType::kF16, 0xa9605cef6e974142ull},   // ggml-q4_1-f16
      {DType::kBF16, 0x3f876f98238cf4a1ull},  // ggml-q4_1-bf16
  };
  for (const Case& c : cases) {
    SpecPredictorOptions o;
    o.arithmetic = SpecPredictorOptions::Arithmetic::kGgml;
    o.kv_dtype = c.kv_dtype;
    EXPECT_EQ(RunDigest(o, {}, kTokens), c.golden) << std::hex << o.VariantName() << ", 1 thread";
    o.threads = 2;
    EXPECT_EQ(RunDigest(o, {1, 40, 41}, kTokens), c.golden)
        << std::hex << o.VariantName() << ", 2 threads, splits";
  }
}

}  // namespace
}  // namespace kvstash::model
