// SpecPredictor: the deterministic quantised copy of a model that the spec codec runs
// on both sides (encoder and decoder) to predict the KV cache (docs/architecture.md §3,
// docs/methods.md §1).
//
// READ ME FIRST
// - Output bits are a pure function of (weights, options, tokens): identical on every
//   CPU, with the scalar or AVX2 GEMM, with any thread count, and whatever the batch
//   split of the prompt (running tokens [0, a) then [a, n) equals running [0, n)).
//   The CUDA port must reproduce the same operation order.
// - How: every projection (q, k, v, o, gate, up, down) is an exact int8 x int8 -> int32
//   product (numerics/int8_gemm.h) of weights quantised once per output channel
//   (or per group of 128 input channels) and activations quantised per token
//   (numerics/quantize.h); every other step runs in fp32 with a fixed operation
//   order, no contraction, and numerics/det_math.h's exp/rsqrt. Reductions (RMSNorm
//   sums of squares, attention dot products) use the canonical 8-lane order of
//   CanonicalDot() below; softmax sums and the attention-weighted V sums run over
//   positions in increasing order.
// - Speed (CPU, bits unchanged): with the kAuto / kAvx2 backend each projection runs the
//   packed, register-blocked GEMM of numerics/int8_gemm_packed.h (weights packed once
//   in Create; one activation quantisation shared by q/k/v and by gate/up), attention
//   runs in tiles of 8 tokens x the query heads of one kv head
//   (model/predictor/spec_predictor_avx2.h), and exp/SiLU are vectorised lane for lane.
//   On a CPU with AVX-512 (spec::CpuHasAvx512; kAuto, kAvx512 or kAmx, not kAvx2) the
//   GEMM is the vpdpwssd kernel (numerics/int8_gemm_packed_avx512.cc) and the tile,
//   exp and SiLU the AVX-512 forms (model/predictor/spec_predictor_avx512.h); with AMX
//   too (spec::CpuHasAmx; kAuto or kAmx) the GEMMs whose groups are multiples of 64
//   (w8a16-g128, w8a8) run on AMX tiles (numerics/int8_gemm_packed_amx.cc). kScalar
//   keeps the portable reference path (QuantizeRows* + *GemmGroupedNT, AttentionRow);
//   tests/model/predictor/predictor_golden_test.cc pins the output digests of both.
// - The embedding rows and norm weights are the model's fp32 values. RoPE tables are
//   built once on the host as transformers builds them (fp32 inv_freq and angle), with
//   det_math's sin/cos in double rounded to fp32.
// - Weights: int8 per output channel or per (output channel, G input channels) group
//   (G = 128: the block size of published FP8 checkpoints); activations int8 or int16
//   per token or per (token, G-channel) group. Variant names: "w8a8" (per channel,
//   int8 activations), "w8a16-g128" (the default), ...
// - Arithmetic::kGgml ("ggml-q4_1-f16", "ggml-q4_1-bf16") instead copies llama.cpp's CPU
//   backend (flash attention off) on a GGUF model with Q4_1 projections, so that it
//   predicts llama.cpp's KV rather than our runtime's: the file's own Q4_1 blocks times
//   activations quantised to Q8_1 as ggml does (numerics/ggml_ops.h), ggml's
//   rms_norm (double sum), NORM RoPE on the file's interleaved q/k rows with ggml's
//   angle recurrence theta_i = theta_{i-1} * base^(-2/d), and attention over the KV
//   cache rounded to kv_dtype with the query and the softmax weights rounded to the
//   same dtype (ggml converts them to the cache's vec_dot type); softmax sum in
//   double, p = e * float(1 / sum). K is returned in the canonical rotate_half order.
//   The projections take the path `backend` selects (ggml_gemm.h: AVX-512 VNNI, AVX2
//   or the scalar DotQ4_1Q8_1), with the same bits on each; the same determinism
//   guarantees hold.
//
// Shapes: K (after RoPE, as engines cache it) and V per attention layer are
// [T, n_kv_heads, head_dim] fp32 row-major.
// Thread-safety: a SpecPredictor is immutable after Create; Run may be called
// concurrently with distinct PredictorCache objects.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "kvstash/dtype.h"
#include "kvstash/result.h"
#include "model/forward/model.h"
#include "numerics/ggml_gemm.h"
#include "numerics/ggml_ops.h"
#include "numerics/int8_gemm.h"
#include "numerics/int8_gemm_packed.h"
#include "numerics/quantize.h"

namespace kvstash::model {

struct SpecPredictorOptions {
  // Channels per quantisation group of weights and activations along the input
  // dimension; 0 = one group per row (per output channel / per token). Default: 128.
  int group = 128;
  // Bits of the per-token activation quantisation: 8 (W8A8) or 16 (W8A16, int16 x
  // int8 products; REQUIRES 1 <= group <= 512 so the int32 sums stay exact).
  // Default: 16 (measured on SmolLM2-135M: worst per-layer relative RMS error of K/V
  // 4.7% for W8A16-g128 vs 21% for W8A8 per channel; tests/model/predictor/predictor_test.cc).
  int activation_bits = 16;
  // Threads for the projections and attention. Results do not depend on it. Default: 1.
  int threads = 1;
  spec::GemmBackend backend = spec::GemmBackend::kAuto;
  // Whose arithmetic the predictor copies: kInt, our int8 GEMMs (group,
  // activation_bits and backend apply); kGgml, llama.cpp's CPU backend (READ ME FIRST;
  // group and activation_bits are ignored, backend picks the projections' SIMD path,
  // numerics/ggml_gemm.h; REQUIRES a model loaded from a GGUF whose projections
  // are all Q4_1). Default: kInt.
  enum class Arithmetic : uint8_t { kInt, kGgml };
  Arithmetic arithmetic = Arithmetic::kInt;
  // kGgml only: the KV cache dtype llama.cpp keeps, kF16 or kBF16 (its later layers
  // attend over that rounded cache). Default: kF16.
  DType kv_dtype = DType::kF16;
  // kInt only: how attention multiplies. kFp32: scores and weighted V sums in fp32 in
  // the canonical orders (READ ME FIRST). kInt8: the integer attention of
  // spec_predictor_int_attention.cc ("-attn8" variants: K and V rows quantised to int8,
  // queries and softmax weights to int16, both products exact int8 x int16 GEMMs on
  // numerics/int8_gemm_packed.h; several times faster, slightly worse predictions).
  // Default: kFp32.
  enum class Attention : uint8_t { kFp32, kInt8 };
  Attention attention = Attention::kFp32;

  // "w8a8", "w8a8-g128", "w8a16-g32", ..., "w8a16-g128-attn8", "ggml-q4_1-f16",
  // "ggml-q4_1-bf16".
  std::string VariantName() const;
};

// The predictor's running KV cache (its own prediction, never the exact cache).
struct PredictorCache {
  uint32_t tokens = 0;
  std::vector<std::vector<float>> k;  // per layer [tokens, n_kv_heads, head_dim], after RoPE
  std::vector<std::vector<float>> v;  // per layer [tokens, n_kv_heads, head_dim]
};

// XXH3-64 over, for each layer in order, the K bytes then the V bytes (fp32
// little-endian) of `cache`: the digest the golden tests (tests/model/predictor/predictor_golden_test.cc)
// and the determinism manifest (tests/determinism/) pin.
uint64_t PredictorCacheDigest(const PredictorCache& cache);

// Where a Run's time went (seconds of wall-clock time, accumulated over Runs given the
// same object): the activation quantisation, the int GEMMs with their fp32 group
// epilogue, causal attention, RMSNorm + RoPE, and the rest (embedding copy, residual
// adds, SiLU x up, cache appends). For benchmarks (`kvstash-bench prefill --predictor
// --profile`); measuring does not change the output bits.
struct PredictorProfile {
  double quantize_s = 0, gemm_s = 0, attention_s = 0, norm_rope_s = 0, other_s = 0;
  double Total() const { return quantize_s + gemm_s + attention_s + norm_rope_s + other_s; }
};

class SpecPredictorCuda;

class SpecPredictor {
 public:
  // Quantises the model's projections. Errors: InvalidArgument for a model whose
  // projections are not dense fp32 (DenseLinear) or an invalid group size; for kGgml,
  // InvalidArgument for a model without GGUF tensors (Model::ggml_layers) or a kv_dtype
  // other than f16/bf16, NotSupported for a projection that is not Q4_1 or a backend
  // that forces an ISA this CPU (or KVSTASH_CPU_PATH) lacks, and for a model with q/k/v
  // biases (Qwen2: llama.cpp's Llama graph has no bias step). The int arithmetic adds
  // Qwen2's biases after the projections, before RoPE, as the reference runtime does
  // (DAdd, element-wise: the same bits on every ISA path and batch split).
  static Result<std::unique_ptr<SpecPredictor>> Create(const Model& model,
                                                       const SpecPredictorOptions& options);

  // Runs `tokens` after the cache's tokens, appending their predicted K/V to `cache`.
  // Errors: InvalidArgument for an out-of-vocabulary token or more than max positions.
  Status Run(std::span<const uint32_t> tokens, PredictorCache* cache) const;
  // As Run, adding each step's wall-clock time to *profile (nullptr: no timing).
  Status Run(std::span<const uint32_t> tokens, PredictorCache* cache, PredictorProfile* profile) const;

  // XXH3-64 over the quantised weights, scales and options: identifies the predictor
  // (two sides with the same digest compute the same predictions).
  uint64_t Digest() const { return digest_; }
  const ModelConfig& config() const { return config_; }
  const SpecPredictorOptions& options() const { return options_; }

 private:
  friend class SpecPredictorCuda;  // model/predictor/spec_predictor_cuda.h reads the weights
  struct QuantLinear {
    uint32_t out = 0, in = 0;
    spec::Int8Rows w;  // [out, in] with scales [out, groups]
    spec::PackedWeights packed;  // w in the blocked kernel's layout (numerics/int8_gemm_packed.h)
  };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;
    std::vector<float> bq, bk, bv;  // q/k/v projection biases (config.qkv_bias()), else empty
    QuantLinear wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  // kGgml: a projection's Q4_1 blocks, rows in the GGUF order, in the layout of the
  // path ggml_path_: blocks (scalar; row-major [out, in / 32]) or packed (SIMD).
  struct GgmlLinear {
    uint32_t out = 0, in = 0;
    std::vector<ggml::UnpackedQ4_1> blocks;
    ggml::PackedQ4_1 packed;
  };
  struct GgmlLayer {
    GgmlLinear wq, wk, wv, wo, w_gate, w_up, w_down;
  };

  SpecPredictor() = default;
  static Status Quantise(const Linear* linear, int group, QuantLinear* out);
  // For each (W, y) of `outputs` (projections with the same input size): y [rows, out]
  // = x [rows, in] * W^T through the quantisation of x (done once, into *work).
  Status Project(std::initializer_list<std::pair<const QuantLinear*, float*>> outputs, const float* x,
                 uint32_t rows, spec::PackedActivations* work, PredictorProfile* profile) const;
  void Attention(uint32_t layer, uint32_t first, uint32_t rows, const float* q,
                 const PredictorCache& cache, float* out) const;
  // Attention with options_.attention == kInt8 (spec_predictor_int_attention.cc): the
  // same arguments and output layout as Attention.
  Status IntAttention(uint32_t layer, uint32_t first, uint32_t rows, const float* q,
                      const PredictorCache& cache, float* out) const;
  void RmsNormRows(float* x, uint32_t rows, uint32_t n, const std::vector<float>& w) const;
  // kGgml (spec_predictor_ggml.cc): unpacks the GGUF blocks; Run's ggml forward pass
  // (arguments already checked); y [rows, W.out] = W x for Q8_1 rows x; attention.
  Status LoadGgml(const Model& model);
  void RunGgml(std::span<const uint32_t> tokens, PredictorCache* cache) const;
  void GgmlProject(const GgmlLinear& W, const ggml::BlockQ8_1* x, uint32_t rows, float* y) const;
  void GgmlAttention(uint32_t layer, uint32_t first, uint32_t rows, const float* q,
                     const PredictorCache& cache, float* out) const;
  // GgmlAttention's rows on AVX2 (ggml_attention_avx2.h) over K, V already rounded.
  void GgmlAttentionRows(uint32_t first, uint32_t rows, const float* q, const float* K, const float* V,
                         float* out) const;

  ModelConfig config_;
  SpecPredictorOptions options_;
  std::shared_ptr<const std::vector<float>> embed_;
  std::vector<Layer> layers_;
  std::vector<GgmlLayer> ggml_layers_;  // kGgml only (then layers_ holds only the norms)
  ggml::GgmlPath ggml_path_ = ggml::GgmlPath::kScalar;  // kGgml: options_.backend resolved
  uint64_t digest_ = 0;
};

// Whether SpecPredictorOptions::Arithmetic::kGgml can run on `model`, without building
// it (reads the config and the GGUF tensor types only): OK, or the error Create would
// return for kGgml: NotSupported for q/k/v biases (Qwen2), an architecture other than
// Llama or QK-norm, or a projection that is not Q4_1 (e.g. Qwen2.5-Coder's Q4_K_M file:
// Q5_0/Q8_0/Q4_K/Q6_K); InvalidArgument for a model not loaded from a GGUF. Callers that
// pick the arithmetic per model (kvstash-demo's --predictor-arithmetic auto) use it and
// fall back to kInt, which runs every model the runtime loads.
Status GgmlArithmeticSupport(const Model& model);

// Canonical fp32 dot product: 8 strided partial sums (lane l sums i = l, l+8, ... in
// increasing i), then ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)). Any SIMD or GPU version
// must keep exactly this order (numerics/spec_predictor_ops.h has the one definition,
// shared with the CUDA kernels; Run's AVX2 attention path reproduces it).
float CanonicalDot(const float* a, const float* b, uint32_t n);

// The RoPE tables the predictor uses: cos/sin [count, head_dim/2] for positions
// first..first+count-1, fp32 inv_freq = 1/theta^(2i/d) and fp32 angle as transformers
// computes them, sin/cos from det_math (double) rounded to fp32.
void DeterministicRope(uint32_t first, uint32_t count, uint32_t head_dim, float theta,
                       std::vector<float>* cos, std::vector<float>* sin);

}  // namespace kvstash::model
