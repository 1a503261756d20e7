// The CUDA spec decoders against the CPU codec: payloads encoded by
// codec/spec/spec_codec.h decode on the GPU (DeviceSpecDecoder, gpu_kernels/
// spec_payload_decode.h; also into caller device memory) to the same bytes as DecodeSpecPayload
// (bf16 and fp8, token counts 1 .. past one 64 Ki-symbol segment, every bit pattern of
// the dtype), and the GPU contexts equal spec::ComputeContexts bit for bit over a sweep
// of predictions with NaN, +-Inf, +-0, subnormals, saturating and tie values. Damaged
// streams are reported as Corruption. Argument checks run without a device; the rest
// skips visibly when there is none (scripts/gpu_check.sh runs it on a GPU machine).
#include "gpu_kernels/spec_decode.h"
#include "gpu_kernels/spec_payload_decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "codec/entropy/rans_segments.h"
#include "codec/spec/spec_calibration.h"
#include "codec/spec/spec_codec.h"
#include "common/byte_io.h"
#include "kvstash/payload_format.h"
#include "tests/gpu_kernels/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::gpu {
namespace {

using spec::ContextConfig;
using testing::DeviceBuffer;

constexpr uint32_t kLayers = 2, kHeads = 2, kDim = 8;

// Chunks whose true values are the prediction plus per-channel noise, or (pattern =
// true) consecutive bit patterns so every pattern of the dtype appears.
struct Fixture {
  KvLayout layout;
  std::vector<KvChunk> chunks;
  std::vector<std::vector<std::vector<float>>> pred_k, pred_v;  // [chunk][layer][n]

  spec::PredictedChunk Prediction(size_t c) const {
    spec::PredictedChunk p;
    p.tokens = chunks[c].tokens;
    for (uint32_t l = 0; l < kLayers; ++l) {
      p.k.push_back(pred_k[c][l].data());
      p.v.push_back(pred_v[c][l].data());
    }
    return p;
  }

  void Add(uint32_t tokens, bool pattern, std::mt19937& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    const size_t n = layout.ScalarsPerTensor(tokens);
    KvChunk ch = KvChunk::Zeros(layout, tokens);
    pred_k.emplace_back();
    pred_v.emplace_back();
    uint32_t next = 0;
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<float> mu(n);
        auto t = kv == 0 ? ch.MutableK(l) : ch.MutableV(l);
        const float scale = 0.05f * static_cast<float>(1 + l + kv);
        if (layout.dtype == DType::kFP8E4M3) ch.scales[2 * l + kv] = scale;
        for (size_t i = 0; i < n; ++i) {
          mu[i] = 3.0f * g(rng);
          const float x = mu[i] + 0.01f * static_cast<float>(1 + i % kDim) * g(rng);
          if (layout.dtype == DType::kBF16) {
            StoreLe<uint16_t>(t.data() + 2 * i, pattern ? static_cast<uint16_t>(next++) : F32ToBf16(x));
          } else if (layout.dtype == DType::kF16) {
            StoreLe<uint16_t>(t.data() + 2 * i, pattern ? static_cast<uint16_t>(next++) : F32ToF16(x));
          } else {
            t[i] = pattern ? static_cast<uint8_t>(next++) : F32ToFp8E4M3(x / scale);
          }
        }
        (kv == 0 ? pred_k : pred_v).back().push_back(std::move(mu));
      }
    }
    chunks.push_back(std::move(ch));
  }
};

spec::SpecArtifact Calibrate(const Fixture& f, size_t n_cal) {
  spec::CalibrationOptions o;
  o.contexts.dtype = f.layout.dtype;
  o.contexts.buckets = 24;
  o.predictor_variant = "gpu-test";
  auto c = spec::SpecCalibrator::Create(f.layout, o);
  EXPECT_OK(c.status());
  for (size_t i = 0; i < n_cal; ++i) EXPECT_OK(c->AddVariance(f.chunks[i].view(), f.Prediction(i)));
  EXPECT_OK(c->FreezeSigma());
  for (size_t i = 0; i < n_cal; ++i) EXPECT_OK(c->AddHistogram(f.chunks[i].view(), f.Prediction(i)));
  auto a = c->Build();
  EXPECT_OK(a.status());
  return std::move(a).value();
}

// Decodes one tensor's stream on the GPU into n stored values (bytes as in KvChunk).
Result<std::vector<uint8_t>> DecodeTensorOnGpu(const ContextConfig& cfg, const DeviceRansTables& tables,
                                               std::span<const float> mu,
                                               std::span<const float> sigma, float scale,
                                               std::span<const uint8_t> stream) {
  const bool fp8 = cfg.dtype == DType::kFP8E4M3;
  const uint64_t n = mu.size();
  KVSTASH_ASSIGN_OR_RETURN(entropy::SegmentDirectory dir, entropy::ParseSegmentDirectory(stream));
  DeviceBuffer<float> d_mu(std::vector<float>(mu.begin(), mu.end()));
  DeviceBuffer<float> d_sigma(std::vector<float>(sigma.begin(), sigma.end()));
  DeviceBuffer<uint8_t> d_framed(std::vector<uint8_t>(stream.begin(), stream.end()));
  DeviceBuffer<uint64_t> d_offsets(dir.offsets);
  DeviceBuffer<uint8_t> d_status(dir.num_segments());
  DeviceBuffer<uint16_t> d_pred(n), d_table(n);
  DeviceBuffer<uint8_t> d_out(n * (fp8 ? 1 : 2));
  SpecTensorDecodeArgs a;
  a.mu = d_mu.get();
  a.n = n;
  a.log2_sigma = d_sigma.get();
  a.row = static_cast<uint32_t>(sigma.size());
  a.fp8_scale = scale;
  a.framed = d_framed.get();
  a.offsets = d_offsets.get();
  a.num_segments = dir.num_segments();
  a.segment_symbols = dir.segment_symbols;
  a.num_symbols = dir.num_symbols;
  a.pred_ordinal = d_pred.get();
  a.table = d_table.get();
  a.segment_status = d_status.get();
  a.out = d_out.get();
  KVSTASH_RETURN_IF_ERROR(DecodeSpecTensorDevice(cfg, tables.view(), a, nullptr));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  KVSTASH_RETURN_IF_ERROR(RansSegmentStatusToStatus(d_status.ToHost()));
  return d_out.ToHost();
}

class SpecDecodeGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(SpecDecodeGpuTest, DecodesCpuPayloadsToTheSameBytes) {
  KVSTASH_SKIP_WITHOUT_GPU();
  Fixture f;
  f.layout = {kLayers, kHeads, kDim, GetParam()};
  std::mt19937 rng(11);
  f.Add(256, false, rng);
  f.Add(256, false, rng);
  // 1 and odd token counts, 4097 tokens = 65,552 scalars: two segments, the second of
  // 16 symbols; 4096 tokens = exactly one full segment; the last chunk walks every bit
  // pattern.
  for (uint32_t tokens : {1u, 3u, 255u, 4096u, 4097u}) f.Add(tokens, false, rng);
  f.Add(GetParam() == DType::kFP8E4M3 ? 64 : 4096, true, rng);
  const spec::SpecArtifact art = Calibrate(f, 2);
  Digest256 model{};
  model[3] = 7;
  ASSERT_OK_AND_ASSIGN(DeviceSpecDecoder decoder, DeviceSpecDecoder::Create(art, nullptr));
  for (size_t c = 2; c < f.chunks.size(); ++c) {
    ASSERT_OK_AND_ASSIGN(auto payload, spec::EncodeSpecPayload(art, f.chunks[c].view(), f.Prediction(c), model, 0));
    ASSERT_OK_AND_ASSIGN(KvChunk cpu, spec::DecodeSpecPayload(art, payload, f.Prediction(c), model));
    DeviceBuffer<uint8_t> on_device(cpu.data.size());
    ASSERT_OK_AND_ASSIGN(KvChunk gpu, decoder.Decode(payload, f.Prediction(c), model, nullptr, on_device.get(),
                                                     cpu.data.size()));
    EXPECT_EQ(gpu.data, cpu.data) << "chunk " << c << " tokens " << f.chunks[c].tokens;
    EXPECT_EQ(gpu.data, f.chunks[c].data) << "chunk " << c;
    EXPECT_EQ(on_device.ToHost(), cpu.data) << "device_out of chunk " << c;
    EXPECT_EQ(gpu.scales, cpu.scales);
  }
}

// Every error of the CPU decoder, with the same code, from the whole-payload decoder.
TEST_P(SpecDecodeGpuTest, PayloadErrorsAreTheCpuDecodersErrors) {
  KVSTASH_SKIP_WITHOUT_GPU();
  Fixture f;
  f.layout = {kLayers, kHeads, kDim, GetParam()};
  std::mt19937 rng(13);
  for (int i = 0; i < 4; ++i) f.Add(64, false, rng);
  const spec::SpecArtifact art = Calibrate(f, 2);
  Digest256 model{};
  model[0] = 1;
  ASSERT_OK_AND_ASSIGN(DeviceSpecDecoder decoder, DeviceSpecDecoder::Create(art, nullptr));
  ASSERT_OK_AND_ASSIGN(auto payload, spec::EncodeSpecPayload(art, f.chunks[2].view(), f.Prediction(2), model, 0));
  auto both = [&](std::span<const uint8_t> p, const spec::PredictedChunk& pred, const Digest256& m,
                  Status::Code want) {
    EXPECT_TRUE(::kvstash::testing::HasCode(spec::DecodeSpecPayload(art, p, pred, m), want));
    EXPECT_TRUE(::kvstash::testing::HasCode(decoder.Decode(p, pred, m, nullptr), want));
  };
  Digest256 other_model = model;
  other_model[0] = 2;
  both(payload, f.Prediction(2), other_model, Status::Code::kMismatch);
  both(payload, f.Prediction(3), model, Status::Code::kMismatch);  // another prediction
  std::vector<uint8_t> damaged = payload;
  damaged[damaged.size() - 9] ^= 0x10;  // inside the last stream
  both(damaged, f.Prediction(2), model, Status::Code::kCorruption);
  std::vector<uint8_t> truncated(payload.begin(), payload.end() - 1);
  both(truncated, f.Prediction(2), model, Status::Code::kCorruption);
  DeviceBuffer<uint8_t> small(8);
  EXPECT_STATUS(decoder.Decode(payload, f.Prediction(2), model, nullptr, small.get(), 8), kInvalidArgument);
}

TEST_P(SpecDecodeGpuTest, DamagedStreamIsCorruption) {
  KVSTASH_SKIP_WITHOUT_GPU();
  Fixture f;
  f.layout = {kLayers, kHeads, kDim, GetParam()};
  std::mt19937 rng(12);
  for (int i = 0; i < 3; ++i) f.Add(128, false, rng);
  const spec::SpecArtifact art = Calibrate(f, 2);
  const bool fp8 = GetParam() == DType::kFP8E4M3;
  // Layer 0's K stream of chunk 2, encoded as the CPU codec does.
  const std::vector<float>& mu = f.pred_k[2][0];
  const float scale = fp8 ? f.chunks[2].scales[0] : 1.0f;
  const size_t n = mu.size();
  std::vector<uint16_t> pred(n), table(n), symbols(n);
  ASSERT_OK(spec::ComputeContexts(art.contexts, mu, art.Log2Sigma(0, 0), scale, pred, table));
  const auto t = f.chunks[2].view().K(0);
  std::vector<uint8_t> symbols8(n);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t bits = fp8 ? t[i] : LoadLe<uint16_t>(t.data() + 2 * i);
    symbols[i] = spec::ResidualSymbol(GetParam(), bits, pred[i]);
    symbols8[i] = static_cast<uint8_t>(symbols[i]);
  }
  std::vector<uint8_t> stream;
  if (fp8) {
    ASSERT_OK(entropy::RansEncodeSegmentedAppend(symbols8, table, *art.tables, 64, &stream));
  } else {
    ASSERT_OK(entropy::RansEncodeSegmentedAppend(symbols, table, *art.tables, 64, &stream));
  }
  ASSERT_OK_AND_ASSIGN(DeviceRansTables tables, DeviceRansTables::Upload(*art.tables, nullptr));
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> good,
                       DecodeTensorOnGpu(art.contexts, tables, mu, art.Log2Sigma(0, 0), scale, stream));
  EXPECT_EQ(good, std::vector<uint8_t>(t.begin(), t.end()));
  // Every state of the last segment's header set to 0 (< 2^16): the kernel must say so.
  ASSERT_OK_AND_ASSIGN(entropy::SegmentDirectory dir, entropy::ParseSegmentDirectory(stream));
  std::vector<uint8_t> damaged = stream;
  const size_t last = dir.offsets[dir.num_segments() - 1];
  std::fill(damaged.begin() + static_cast<long>(last), damaged.begin() + static_cast<long>(last) + 128, 0);
  EXPECT_STATUS(DecodeTensorOnGpu(art.contexts, tables, mu, art.Log2Sigma(0, 0), scale, damaged),
                kCorruption);
}

// Predictions that stress every branch of the context maths: specials, subnormals,
// bf16 / fp8 rounding ties and their neighbours, fp8 saturation, huge and tiny
// magnitudes, plus Gaussian values at several scales.
std::vector<float> SweepOfPredictions(float fp8_scale) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> mu = {0.0f, -0.0f, inf, -inf, std::nanf(""), -std::nanf(""),
                           FromBits(0x7FA00001u), FromBits(1), FromBits(0x807FFFFFu),
                           FromBits(0x00800000u), std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(), 448.0f * fp8_scale,
                           464.0f * fp8_scale, -480.0f * fp8_scale, 1e-10f * fp8_scale};
  for (uint32_t b : {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x00008000u, 0x7F7F8000u}) {
    for (int d = -1; d <= 1; ++d) mu.push_back(FromBits(b + d));  // bf16 ties +-1 ulp
  }
  for (uint32_t q = 0; q < 256; ++q) {  // every fp8 value, its midpoints and neighbours
    const float v = spec::DMul(Fp8E4M3ToF32(static_cast<uint8_t>(q)), fp8_scale);
    const float w = spec::DMul(Fp8E4M3ToF32(static_cast<uint8_t>(q + 1)), fp8_scale);
    mu.push_back(v);
    mu.push_back(std::nextafter(v, inf));
    mu.push_back(0.5f * v + 0.5f * w);
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float s : {1e-38f, 1e-6f, 1e-2f, 1.0f, 3.0f, 1e4f, 1e30f}) {
    for (int i = 0; i < 512; ++i) mu.push_back(s * g(rng));
  }
  return mu;
}

TEST(SpecContextsGpu, EqualCpuBitForBitOverASweep) {
  KVSTASH_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kFP8E4M3}) {
    for (float scale : {1.0f, 0.05f, 3.0e-5f, 1.0e30f}) {
      for (const auto& [s_min, step, buckets, bins] :
           {std::tuple{-3.0f, 0.25f, 64u, 4u}, std::tuple{-8.0f, 0.1f, 200u, 1u},
            std::tuple{0.5f, 1.0f, 1u, 7u}}) {
        ContextConfig cfg;
        cfg.dtype = dtype;
        cfg.s_min = s_min;
        cfg.step = step;
        cfg.buckets = buckets;
        cfg.frac_bins = bins;
        std::vector<float> mu = SweepOfPredictions(scale);
        const uint32_t row = 16;
        mu.resize((mu.size() + row - 1) / row * row, 1.0f);
        std::vector<float> sigma(row);
        const float inf = std::numeric_limits<float>::infinity();
        const float specials[] = {-inf, inf, std::nanf(""), -126.0f, 200.0f, 0.0f};
        for (uint32_t j = 0; j < row; ++j) {
          sigma[j] = j < 6 ? specials[j] : -12.0f + 1.37f * static_cast<float>(j);
        }
        const size_t n = mu.size();
        std::vector<uint16_t> pred(n), table(n);
        ASSERT_OK(spec::ComputeContexts(cfg, mu, sigma, scale, pred, table));
        DeviceBuffer<float> d_mu(mu), d_sigma(sigma);
        DeviceBuffer<uint16_t> d_pred(n), d_table(n);
        ASSERT_OK(ComputeSpecContextsDevice(cfg, d_mu.get(), n, d_sigma.get(), row, scale,
                                            d_pred.get(), d_table.get(), nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<uint16_t> gp = d_pred.ToHost(), gt = d_table.ToHost();
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(gp[i], pred[i]) << "mu bits " << std::hex << Bits(mu[i]) << " scale " << scale;
          ASSERT_EQ(gt[i], table[i]) << "mu bits " << std::hex << Bits(mu[i]) << " sigma "
                                     << sigma[i % row] << " scale " << scale;
        }
      }
    }
  }
}

TEST(SpecDecodeGpuArgs, BadArgumentsAreInvalidArgumentWithoutTouchingTheDevice) {
  ContextConfig cfg;
  uint16_t* none = nullptr;
  EXPECT_STATUS(ComputeSpecContextsDevice(cfg, nullptr, 16, nullptr, 0, 1.0f, none, none, nullptr),
                kInvalidArgument);
  EXPECT_STATUS(ComputeSpecContextsDevice(cfg, nullptr, 17, nullptr, 8, 1.0f, none, none, nullptr),
                kInvalidArgument);
  ContextConfig bad = cfg;
  bad.step = 0.0f;
  EXPECT_STATUS(ComputeSpecContextsDevice(bad, nullptr, 16, nullptr, 8, 1.0f, none, none, nullptr),
                kInvalidArgument);
  ContextConfig f8 = cfg;
  f8.dtype = DType::kFP8E4M3;
  for (float s : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    EXPECT_STATUS(ComputeSpecContextsDevice(f8, nullptr, 16, nullptr, 8, s, none, none, nullptr),
                  kInvalidArgument);
  }
  RansDeviceTablesView tables;
  tables.num_tables = cfg.num_tables();
  tables.symbol_bits = 16;
  SpecTensorDecodeArgs a;
  a.n = 64;
  a.row = 16;
  a.num_symbols = 63;  // stream shorter than the tensor
  a.segment_symbols = 64;
  a.num_segments = 1;
  EXPECT_STATUS(DecodeSpecTensorDevice(cfg, tables, a, nullptr), kInvalidArgument);
  a.num_symbols = 64;
  a.num_segments = 2;  // does not match ceil(64 / 64)
  EXPECT_STATUS(DecodeSpecTensorDevice(cfg, tables, a, nullptr), kInvalidArgument);
  a.num_segments = 1;
  tables.num_tables = 3;  // tables of another artifact
  EXPECT_STATUS(DecodeSpecTensorDevice(cfg, tables, a, nullptr), kInvalidArgument);
  tables.num_tables = cfg.num_tables();
  a.out = reinterpret_cast<uint8_t*>(uintptr_t{0x1001});  // odd address for bf16
  EXPECT_STATUS(DecodeSpecTensorDevice(cfg, tables, a, nullptr), kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SpecDecodeGpuTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kFP8E4M3),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace kvstash::gpu
