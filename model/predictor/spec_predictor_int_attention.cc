// The spec predictor's integer attention (SpecPredictorOptions::Attention::kInt8, the
// "-attn8" variants): both attention products as exact integer GEMMs on the packed
// kernels of numerics/int8_gemm_packed.h (scalar, AVX2, AVX-512 VNNI or AMX: the same
// bits), the softmax in fp32 in fixed orders. Per layer and kv head g, for a query row r
// (token t, query head of g) that sees keys j < n = first + t + 1:
//
//   K: each key row quantised to int8 (one scale per row: QuantizeGroup, quantize.h).
//   q' = DMul(q, DetRsqrt(head_dim)) per value, quantised to int16 per row.
//   s_j = the grouped GEMM output float(dot(q'_int, k_j,int)) * (scale_q * scale_k_j)
//   m = max_j s_j (order-free);  e_j = DetExp(DSub(s_j, m))
//   sum = Sum16(e_0..e_{n-1}): lane l (0..15) adds e_j for j = l, l + 16, ... in
//         increasing j (from +0), then the lanes in the tree
//         ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), likewise for l8..l15, then the two.
//   V: each value row quantised to int8 (scale v_j per row).
//   w_j = DMul(e_j, v_j) for j < n, 0 for the keys past n (to the run's padded key count),
//         quantised to int16 per (row, group of 128 keys counted from key 0).
//   o_d = the grouped GEMM output sum over key groups ascending of
//         float(dot_group(w_int, column d of V_int)) * scale_w_group (V's scale is 1);
//   out_d = DDiv(o_d, sum).
//
// Why the bits do not depend on the batch split of the prompt or the backend: every
// quantisation scale depends only on its own row (keys, values, the query) or on one
// row's weights within one key group, which are 0 past the row's keys; the integer dots
// are exact; a run with more keys only adds key groups whose weights are all 0, whose
// terms are float(0) * 1 = +0, and o starts at +0 so adding +0 never changes it.
// Softmax steps are element-wise (any vector width) or in the orders written above.
// Layout: keys in blocks of 128 (one key group), each block's K and V^T packed
// separately, so a tile of queries multiplies only the blocks its rows can see; o sums
// the blocks' GEMM outputs in ascending block order (DAdd from +0), exactly the grouped
// GEMM's own order over the key groups.
// Cost: 2 * n * head_dim integer multiply-adds per row on the GEMM kernels (AMX tiles
// where the CPU has them) instead of fp32 multiplies and adds in a fixed order; the
// quantised K and V make the predicted KV slightly worse (the bits per scalar the spec
// bench reports for the variant).
#include <algorithm>
#include <vector>

#include "model/predictor/spec_predictor.h"
#include "numerics/det_math.h"
#include "numerics/int8_gemm_packed.h"
#include "numerics/parallel_for.h"
#include "numerics/quantize_group.h"
#include "numerics/spec_predictor_ops.h"
#if defined(__x86_64__)
#include "model/predictor/spec_predictor_avx2.h"
#include "model/predictor/spec_predictor_avx512.h"
#endif

namespace kvstash::model {
namespace {

constexpr uint32_t kKeyGroup = 128;   // keys per block (one quantisation group of the weights)
constexpr uint32_t kTileTokens = 32;  // query tokens per job (bounds the score buffer)

// Portable ExpSumWeights (avx512::ExpSumWeights has the contract).
float ExpSumWeightsPortable(spec::GemmBackend backend, float* s, uint32_t n, const float* v_scale, float* w) {
  float mx = -3.40282347e38f;
  for (uint32_t j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  for (uint32_t j = 0; j < n; ++j) s[j] = spec::DSub(s[j], mx);
#if defined(__x86_64__)
  if (backend != spec::GemmBackend::kScalar && spec::CpuHasAvx2()) {
    avx2::DetExp(s, s, n);
  } else {
    for (uint32_t j = 0; j < n; ++j) s[j] = spec::DetExp(s[j]);
  }
#else
  (void)backend;
  for (uint32_t j = 0; j < n; ++j) s[j] = spec::DetExp(s[j]);
#endif
  float lane[16] = {};
  for (uint32_t j = 0; j < n; ++j) lane[j % 16] = spec::DAdd(lane[j % 16], s[j]);
  for (uint32_t j = 0; j < n; ++j) w[j] = spec::DMul(s[j], v_scale[j]);
  return Tree16(lane);
}

float ExpSumWeights(spec::GemmBackend backend, float* s, uint32_t n, const float* v_scale, float* w) {
#if defined(__x86_64__)
  if (backend != spec::GemmBackend::kScalar && spec::CpuHasAvx2()) {
    const auto avx512 = spec::UseAvx512(backend);
    if (avx512.ok() && *avx512) return avx512::ExpSumWeights(s, n, v_scale, w);
  }
#endif
  return ExpSumWeightsPortable(backend, s, n, v_scale, w);
}

// One key block of one kv head in the GEMM kernels' layouts.
struct KeyBlock {
  spec::PackedWeights k;   // [keys in block, head_dim] int8, a scale per key
  spec::PackedWeights vt;  // [head_dim, 128] int8 (V transposed, keys past the block 0), scales 1
};

// Quantises and packs keys [j0, j0 + count) of one kv head (rows at K/V + j * stride);
// v_scale[j] receives each value row's scale.
Status PackBlock(const float* K, const float* V, size_t stride, uint32_t j0, uint32_t count, uint32_t hd,
                 float* v_scale, KeyBlock* out) {
  std::vector<int8_t> kq(static_cast<size_t>(count) * hd), vq(hd), vt(static_cast<size_t>(hd) * kKeyGroup, 0);
  std::vector<float> k_scale(count);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t j = j0 + i;
    k_scale[i] = spec::QuantizeGroup(K + j * stride, hd, 127.0f, &kq[static_cast<size_t>(i) * hd]);
    v_scale[j] = spec::QuantizeGroup(V + j * stride, hd, 127.0f, vq.data());
    for (uint32_t d = 0; d < hd; ++d) vt[static_cast<size_t>(d) * kKeyGroup + i] = vq[d];
  }
  KVSTASH_RETURN_IF_ERROR(spec::PackWeights(kq, k_scale, static_cast<int>(count), static_cast<int>(hd),
                                            static_cast<int>(hd), &out->k));
  const std::vector<float> ones(hd, 1.0f);
  return spec::PackWeights(vt, ones, static_cast<int>(hd), static_cast<int>(kKeyGroup),
                           static_cast<int>(kKeyGroup), &out->vt);
}

}  // namespace

Status SpecPredictor::IntAttention(uint32_t layer, uint32_t first, uint32_t rows, const float* q,
                                   const PredictorCache& cache, float* out) const {
  const ModelConfig& c = config_;
  const uint32_t hd = c.head_dim, per_kv = c.n_heads / c.n_kv_heads;
  const float scale = spec::DetRsqrt(static_cast<float>(hd));
  const size_t stride = static_cast<size_t>(c.n_kv_heads) * hd,
               token_stride = static_cast<size_t>(c.n_heads) * hd;
  const uint32_t keys = first + rows, blocks = (keys + kKeyGroup - 1) / kKeyGroup;
  const spec::GemmBackend backend = options_.backend;
  const int threads = std::max(1, options_.threads);

  // Every (kv head, key block) packed once.
  std::vector<KeyBlock> kb(static_cast<size_t>(c.n_kv_heads) * blocks);
  std::vector<std::vector<float>> v_scale(c.n_kv_heads, std::vector<float>(keys));
  std::vector<Status> status(kb.size());
  numerics::ParallelFor(static_cast<uint32_t>(kb.size()), threads, [&](uint32_t, uint32_t i) {
    const uint32_t g = i / blocks, b = i % blocks, j0 = b * kKeyGroup;
    status[i] =
        PackBlock(&cache.k[layer][static_cast<size_t>(g) * hd], &cache.v[layer][static_cast<size_t>(g) * hd],
                  stride, j0, std::min(kKeyGroup, keys - j0), hd, v_scale[g].data(), &kb[i]);
  });
  for (const Status& s : status) KVSTASH_RETURN_IF_ERROR(s);

  // Jobs: (token tile, kv head); each writes its own rows of out. Scratch per worker,
  // sized for the largest tile (reused: fresh buffers per job cost page faults).
  const uint32_t tiles = (rows + kTileTokens - 1) / kTileTokens;
  const size_t max_m = static_cast<size_t>(std::min(kTileTokens, rows)) * per_kv;
  const size_t max_width = static_cast<size_t>(blocks) * kKeyGroup;
  struct Scratch {
    std::vector<float> x, s, part, w, wb, o, ob, sums;
    spec::PackedActivations a;
  };
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  for (Scratch& sc : scratch) {
    sc.x.resize(max_m * hd);
    sc.s.resize(max_m * max_width);
    sc.w.resize(max_m * max_width);
    sc.part.resize(max_m * kKeyGroup);
    sc.wb.resize(max_m * kKeyGroup);
    sc.o.resize(max_m * hd);
    sc.ob.resize(max_m * hd);
    sc.sums.resize(max_m);
  }
  status.assign(static_cast<size_t>(tiles) * c.n_kv_heads, Status::Ok());
  numerics::ParallelFor(tiles * c.n_kv_heads, threads, [&](uint32_t worker, uint32_t job) {
    const uint32_t t0 = (job / c.n_kv_heads) * kTileTokens, g = job % c.n_kv_heads;
    const uint32_t tokens = std::min(kTileTokens, rows - t0), m = tokens * per_kv;
    const uint32_t seen = first + t0 + tokens,
                   nb = (seen + kKeyGroup - 1) / kKeyGroup;  // blocks any row sees
    const KeyBlock* B = &kb[static_cast<size_t>(g) * blocks];
    Scratch& S = scratch[worker];
    auto run = [&]() -> Status {
      // Row i = (token t0 + i / per_kv, query head g * per_kv + i % per_kv).
      auto q_row = [&](uint32_t i) {
        return q + (t0 + i / per_kv) * token_stride + (static_cast<size_t>(g) * per_kv + i % per_kv) * hd;
      };
      const auto mhd = static_cast<size_t>(m) * hd;
      for (uint32_t i = 0; i < m; ++i) {
        const float* src = q_row(i);
        for (uint32_t d = 0; d < hd; ++d) S.x[static_cast<size_t>(i) * hd + d] = spec::DMul(src[d], scale);
      }
      KVSTASH_RETURN_IF_ERROR(spec::QuantizeActivations(std::span(S.x.data(), mhd), static_cast<int>(m),
                                                        B[0].k.shape, 16, backend, 1, &S.a));
      // Scores [m, nb * 128], block by block.
      const size_t width = static_cast<size_t>(nb) * kKeyGroup;
      for (uint32_t b = 0; b < nb; ++b) {
        const uint32_t count = static_cast<uint32_t>(B[b].k.n);
        KVSTASH_RETURN_IF_ERROR(spec::GemmPacked(
            S.a, B[b].k, std::span(S.part.data(), static_cast<size_t>(m) * count), backend, 1));
        for (uint32_t i = 0; i < m; ++i) {
          std::copy_n(&S.part[static_cast<size_t>(i) * count], count, &S.s[i * width + b * kKeyGroup]);
        }
      }
      for (uint32_t i = 0; i < m; ++i) {
        const uint32_t n = first + t0 + i / per_kv + 1;  // causal: keys 0..n-1
        float* wi = &S.w[i * width];
        S.sums[i] = ExpSumWeights(backend, &S.s[i * width], n, v_scale[g].data(), wi);
        std::fill(wi + n, wi + width, 0.0f);
      }
      // o = sum over key blocks ascending of the block's grouped-GEMM output.
      std::fill_n(S.o.begin(), mhd, 0.0f);
      const auto ob = std::span(S.ob.data(), mhd);
      for (uint32_t b = 0; b < nb; ++b) {
        for (uint32_t i = 0; i < m; ++i) {
          std::copy_n(&S.w[i * width + b * kKeyGroup], kKeyGroup, &S.wb[static_cast<size_t>(i) * kKeyGroup]);
        }
        KVSTASH_RETURN_IF_ERROR(
            spec::QuantizeActivations(std::span(S.wb.data(), static_cast<size_t>(m) * kKeyGroup),
                                      static_cast<int>(m), B[b].vt.shape, 16, backend, 1, &S.a));
        KVSTASH_RETURN_IF_ERROR(spec::GemmPacked(S.a, B[b].vt, ob, backend, 1));
        for (size_t e = 0; e < mhd; ++e) S.o[e] = spec::DAdd(S.o[e], ob[e]);
      }
      for (uint32_t i = 0; i < m; ++i) {
        float* dst = out + (q_row(i) - q);
        for (uint32_t d = 0; d < hd; ++d)
          dst[d] = spec::DDiv(S.o[static_cast<size_t>(i) * hd + d], S.sums[i]);
      }
      return Status::Ok();
    };
    status[job] = run();
  });
  for (const Status& s : status) KVSTASH_RETURN_IF_ERROR(s);
  return Status::Ok();
}

}  // namespace kvstash::model
