// Synthetic correlated KV rows for the dckv mechanics tests (fixed seed): each layer's
// K and V row is a fixed random linear image of a few shared latent factors plus
// small noise, so that PCA finds structure and rate control has something to trade.
// Real-model figures come from `kvstash-bench codec --codec dckv`, not from here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_rope.h"
#include "kvstash/dtype.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::dckv::testing {

inline constexpr uint32_t kLayers = 3, kHeads = 2, kHeadDim = 8, kLatent = 6;

// Rows of `tokens` positions; the same seed gives the same mixing matrix, `stream`
// picks the latent draws (different streams = disjoint "texts").
inline DckvRows MakeRows(uint64_t tokens, uint32_t stream) {
  std::mt19937 mix_rng(1234);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const uint32_t hr = kHeads * kHeadDim;
  std::vector<float> mix(2ull * kLayers * hr * kLatent);
  for (auto& m : mix) m = n01(mix_rng);
  std::mt19937 rng(99 + stream);
  DckvRows r;
  r.n_layers = kLayers;
  r.n_kv_heads = kHeads;
  r.head_dim = kHeadDim;
  r.rows = tokens;
  r.k.assign(kLayers, std::vector<float>(tokens * hr));
  r.v.assign(kLayers, std::vector<float>(tokens * hr));
  std::vector<float> z(kLatent);
  for (uint64_t t = 0; t < tokens; ++t) {
    for (uint32_t j = 0; j < kLatent; ++j) z[j] = n01(rng) * static_cast<float>(kLatent - j);
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (uint32_t c = 0; c < hr; ++c) {
          const float* m = &mix[((2ull * l + kv) * hr + c) * kLatent];
          float x = 0.5f + 0.05f * n01(rng);
          for (uint32_t j = 0; j < kLatent; ++j) x += m[j] * z[j];
          (kv == 0 ? r.k : r.v)[l][t * hr + c] = x;
        }
      }
    }
  }
  return r;
}

inline constexpr uint32_t kVocab = 24, kEmbedDim = 5;

// The fixed embedding table [kVocab, kEmbedDim] of the conditioned rows.
inline std::shared_ptr<const std::vector<float>> Embedding() {
  std::mt19937 rng(777);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  auto e = std::make_shared<std::vector<float>>(kVocab * kEmbedDim);
  for (auto& v : *e) v = n01(rng);
  return e;
}

// Rows whose first three latent factors are a fixed linear image of the row's token
// embedding (tokens uniform over the vocabulary) and whose fourth factor follows the
// previous row's (a slowly varying one, which the checkerboard model can predict from
// neighbours), plus MakeRows scaled by 0.05. Documents of `doc_rows` rows.
inline DckvRows MakeConditionedRows(uint64_t tokens, uint32_t stream, uint64_t doc_rows = 100) {
  DckvRows r = MakeRows(tokens, stream);
  for (auto* kv : {&r.k, &r.v}) {  // the unpredictable part: small
    for (auto& layer : *kv)
      for (float& x : layer) x *= 0.05f;
  }
  const auto embed = Embedding();
  std::mt19937 rng(500 + stream);
  std::uniform_int_distribution<uint32_t> pick(0, kVocab - 1);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::mt19937 mix_rng(4321);
  const uint32_t hr = kHeads * kHeadDim;
  std::vector<float> mix(2ull * kLayers * hr * 4);
  for (auto& m : mix) m = n01(mix_rng);
  std::vector<float> tmap(3 * kEmbedDim);
  for (auto& m : tmap) m = 6.0f * n01(mix_rng);
  float slow = 0;
  for (uint64_t t = 0; t < tokens; ++t) {
    const uint32_t id = pick(rng);
    r.tokens.push_back(id);
    float f[4];
    for (int j = 0; j < 3; ++j) {
      f[j] = 0;
      for (uint32_t k = 0; k < kEmbedDim; ++k) f[j] += tmap[j * kEmbedDim + k] * (*embed)[id * kEmbedDim + k];
    }
    slow = t % doc_rows == 0 ? 20.0f * n01(rng) : 0.95f * slow + 6.0f * n01(rng);
    f[3] = slow;
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (uint32_t c = 0; c < hr; ++c) {
          const float* m = &mix[((2ull * l + kv) * hr + c) * 4];
          float& x = (kv == 0 ? r.k : r.v)[l][t * hr + c];
          for (int j = 0; j < 4; ++j) x += m[j] * f[j];
        }
      }
    }
  }
  for (uint64_t done = 0; done < tokens; done += doc_rows)
    r.document_rows.push_back(std::min(doc_rows, tokens - done));
  r.embed = embed;
  r.vocab = kVocab;
  r.embed_dim = kEmbedDim;
  return r;
}

// Tokens [begin, end) of `rows` as a canonical chunk of `dtype` (f32 or bf16), K
// rotated by RoPE at positions begin.. (as an engine caches it), theta 10000.
inline KvChunk MakeChunk(const DckvRows& r, uint32_t begin, uint32_t end, DType dtype) {
  const uint32_t hr = r.n_kv_heads * r.head_dim;
  KvChunk c = KvChunk::Zeros({r.n_layers, r.n_kv_heads, r.head_dim, dtype}, end - begin);
  std::vector<float> row(hr);
  for (uint32_t l = 0; l < r.n_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      auto dst = kv == 0 ? c.MutableK(l) : c.MutableV(l);
      for (uint32_t t = begin; t < end; ++t) {
        const auto& src = kv == 0 ? r.k[l] : r.v[l];
        row.assign(src.begin() + static_cast<size_t>(t) * hr, src.begin() + static_cast<size_t>(t + 1) * hr);
        if (kv == 0) {
          for (uint32_t h = 0; h < r.n_kv_heads; ++h)
            RotateHead(row.data() + h * r.head_dim, r.head_dim, t, 10000.0f, false);
        }
        for (uint32_t i = 0; i < hr; ++i) {
          const uint64_t at = static_cast<uint64_t>(t - begin) * hr + i;
          if (dtype == DType::kF32) {
            std::memcpy(dst.data() + 4 * at, &row[i], 4);
          } else {
            const uint16_t b = dtype == DType::kF16 ? F32ToF16(row[i]) : F32ToBf16(row[i]);
            std::memcpy(dst.data() + 2 * at, &b, 2);
          }
        }
      }
    }
  }
  return c;
}

// Artifacts of the decoder comparisons (CPU, host-run GPU elements, GPU): plain PCA
// (raw head 2, tail 3), token-conditioned with or without the checkerboard model (raw
// head 2, tail 3), weighted PCA with block 0 weighing 100 (an encoder scale; no raw
// rows). Calibrated on stream 0; evaluate on other streams.
inline Result<DckvArtifact> PlainArtifact(double ratio, uint32_t group_layers) {
  KVSTASH_ASSIGN_OR_RETURN(auto basis, FitDckvBasis(MakeRows(800, 0), group_layers));
  DckvRateOptions o;
  o.target_ratio = ratio;
  o.raw_head = 2;
  o.raw_tail = 3;
  return MakeDckvArtifact(basis, o);
}

inline Result<DckvArtifact> ConditionedArtifact(double ratio, bool checkerboard) {
  DckvFitOptions fo;
  fo.embed_rank = kEmbedDim;
  KVSTASH_ASSIGN_OR_RETURN(auto basis, FitDckvBasis(MakeConditionedRows(1200, 0), 2, fo));
  DckvRateOptions o;
  o.target_ratio = ratio;
  o.raw_head = 2;
  o.raw_tail = 3;
  o.checkerboard = checkerboard;
  return MakeDckvArtifact(basis, o);
}

inline Result<DckvArtifact> WeightedArtifact(double ratio) {
  DckvFitOptions fo;
  fo.output_weight.assign(2 * kLayers * kHeads, 1.0);
  fo.output_weight[0] = 100.0;
  KVSTASH_ASSIGN_OR_RETURN(auto basis, FitDckvBasis(MakeRows(800, 0), 2, fo));
  DckvRateOptions o;
  o.target_ratio = ratio;
  o.raw_head = 0;
  o.raw_tail = 0;
  return MakeDckvArtifact(basis, o);
}

// A correction net (dckv_artifact.h DckvNet) of `hidden` units from `inputs` to
// `outputs` values: first layer N(0, 1), last layer N(0, 1) * scale (0: a zero last
// layer, the trainer's initial state). Random weights for mechanics tests, no quality.
inline DckvNet RandomNet(uint32_t hidden, uint32_t inputs, uint32_t outputs, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  DckvNet net;
  net.hidden = hidden;
  net.w1.resize(static_cast<size_t>(hidden) * inputs);
  net.b1.resize(hidden);
  net.w2.resize(static_cast<size_t>(outputs) * hidden);
  net.b2.resize(outputs);
  for (auto* v : {&net.w1, &net.b1})
    for (float& x : *v) x = n01(rng);
  for (auto* v : {&net.w2, &net.b2})
    for (float& x : *v) x = n01(rng) * scale;
  return net;
}

// Decoded bf16 / f32 chunk values as fp32, canonical order.
inline std::vector<float> ChunkValues(const KvChunk& c) {
  const uint64_t n = c.layout.ScalarsPerToken() * c.tokens;
  std::vector<float> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (c.layout.dtype == DType::kF32) {
      std::memcpy(&out[i], c.data.data() + 4 * i, 4);
    } else if (c.layout.dtype == DType::kF16) {
      out[i] = F16ToF32(static_cast<uint16_t>(c.data[2 * i] | (c.data[2 * i + 1] << 8)));
    } else {
      uint32_t u = static_cast<uint32_t>(c.data[2 * i] | (c.data[2 * i + 1] << 8)) << 16;
      std::memcpy(&out[i], &u, 4);
    }
  }
  return out;
}

}  // namespace kvstash::dckv::testing
