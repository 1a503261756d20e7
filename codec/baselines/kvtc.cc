#include "codec/baselines/kvtc.h"

#include <openssl/sha.h>
#include <zstd.h>

#include <Eigen/Dense>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <queue>

#include "codec/dckv/dckv_rope.h"
#include "common/byte_io.h"
#include "kvstash/dtype.h"
#include "kvstash/payload_format.h"

namespace kvstash::baselines {
namespace {

// Optimal uniform quantiser of a unit Gaussian with 2^b levels (J. Max, "Quantizing
// for minimum distortion", IRE Trans. IT-6, 1960): step and mean squared error.
constexpr double kMaxStep[9] = {0, 1.596, 0.9957, 0.5860, 0.3352, 0.1881, 0.1041, 0.0569, 0.0308};
constexpr double kMaxMse[9] = {1.0, 0.3634, 0.1188, 0.03744, 0.01154, 0.00349, 0.001035, 0.000302, 0.0000869};

double UnitStep(int b) { return b <= 8 ? kMaxStep[b] : kMaxStep[8] * std::ldexp(1.0, 8 - b); }
double UnitMse(int b) { return b <= 8 ? kMaxMse[b] : kMaxMse[8] * std::ldexp(1.0, 2 * (8 - b)); }

float LoadValue(std::span<const uint8_t> bytes, DType dtype, uint64_t i) {
  if (dtype == DType::kF32) return std::bit_cast<float>(LoadLe<uint32_t>(bytes.data() + 4 * i));
  return std::bit_cast<float>(static_cast<uint32_t>(LoadLe<uint16_t>(bytes.data() + 2 * i)) << 16);
}

uint16_t ToBf16(float x) {
  uint16_t out = 0;
  (void)ConvertF32ToBf16(std::span<const float>(&x, 1), std::span<uint16_t>(&out, 1));
  return out;
}

struct BitWriter {
  std::vector<uint8_t> bytes;
  uint64_t acc = 0;
  int n = 0;
  void Put(uint32_t v, int bits) {
    acc |= static_cast<uint64_t>(v) << n;
    n += bits;
    while (n >= 8) {
      bytes.push_back(static_cast<uint8_t>(acc));
      acc >>= 8;
      n -= 8;
    }
  }
  void Flush() {
    if (n > 0) bytes.push_back(static_cast<uint8_t>(acc));
    acc = 0;
    n = 0;
  }
};

}  // namespace

Result<KvtcCodec> KvtcCodec::Create(const dckv::DckvBasis& basis, double target_ratio, float rope_theta,
                                    uint32_t raw_head, uint32_t raw_tail) {
  if (basis.groups.empty()) return Status::InvalidArgument("kvtc: empty basis");
  for (const auto& g : basis.groups) {
    if (!g.dim_scale.empty()) return Status::InvalidArgument("kvtc: needs a plain (unweighted) PCA basis");
  }
  if (!(target_ratio > 1.0) || !std::isfinite(target_ratio)) return Status::InvalidArgument("kvtc: ratio must be > 1");
  const uint64_t budget = static_cast<uint64_t>(
      16.0 * 2.0 * basis.n_layers * basis.n_kv_heads * basis.head_dim / target_ratio);
  // Greedy marginal-return allocation (optimal for the convex D(b)).
  struct Item { double gain; uint32_t group, comp; };
  auto cmp = [](const Item& a, const Item& b) { return a.gain < b.gain; };
  std::priority_queue<Item, std::vector<Item>, decltype(cmp)> heap(cmp);
  std::vector<std::vector<uint8_t>> bits(basis.groups.size());
  for (uint32_t g = 0; g < basis.groups.size(); ++g) {
    const auto& gb = basis.groups[g];
    bits[g].assign(gb.dims, 0);
    for (uint32_t i = 0; i < gb.dims; ++i) {
      if (gb.variance[i] > 0) heap.push({gb.variance[i] * (UnitMse(0) - UnitMse(1)), g, i});
    }
  }
  for (uint64_t used = 0; used < budget && !heap.empty(); ++used) {
    const Item it = heap.top();
    heap.pop();
    const int b = ++bits[it.group][it.comp];
    if (b < kMaxBits) {
      heap.push({basis.groups[it.group].variance[it.comp] * (UnitMse(b) - UnitMse(b + 1)), it.group, it.comp});
    }
  }
  KvtcCodec c;
  c.n_layers_ = basis.n_layers;
  c.n_kv_heads_ = basis.n_kv_heads;
  c.head_dim_ = basis.head_dim;
  c.rope_theta_ = rope_theta;
  c.raw_head_ = raw_head;
  c.raw_tail_ = raw_tail;
  std::vector<uint8_t> desc;
  ByteWriter w(&desc);
  for (uint32_t g = 0; g < basis.groups.size(); ++g) {
    const auto& gb = basis.groups[g];
    KvtcGroup k;
    k.first_layer = gb.first_layer;
    k.layers = gb.layers;
    k.dims = gb.dims;
    k.mean = gb.mean;
    for (uint32_t i = 0; i < gb.dims; ++i) {
      if (bits[g][i] == 0) continue;
      k.basis.insert(k.basis.end(), gb.basis.begin() + static_cast<size_t>(i) * gb.dims,
                     gb.basis.begin() + static_cast<size_t>(i + 1) * gb.dims);
      k.bits.push_back(bits[g][i]);
      k.step.push_back(static_cast<float>(std::sqrt(gb.variance[i]) * UnitStep(bits[g][i])));
      w.U32(i);
      w.U8(bits[g][i]);
      w.U32(std::bit_cast<uint32_t>(k.step.back()));
    }
    for (float v : k.mean) w.U32(std::bit_cast<uint32_t>(v));
    for (float v : k.basis) w.U32(std::bit_cast<uint32_t>(v));
    c.groups_.push_back(std::move(k));
  }
  SHA256(desc.data(), desc.size(), c.digest_.data());
  return c;
}

uint64_t KvtcCodec::BitsPerToken() const {
  uint64_t b = 0;
  for (const auto& g : groups_) for (uint8_t x : g.bits) b += x;
  return b;
}

namespace {

struct Parts {
  uint32_t h = 0, t = 0, c = 0;
  std::vector<uint16_t> raw;     // (h + t) rows, bf16
  std::vector<int32_t> q;        // c * components
};

}  // namespace

// Shared reconstruction: raw rows and dequantised coded rows to a bf16 chunk.
static KvChunk Rebuild(const std::vector<KvtcGroup>& groups, uint32_t L, uint32_t H, uint32_t D, float theta,
                       uint32_t token_offset, const Parts& p) {
  const uint32_t hr = H * D;
  const uint64_t per_token = 2ull * L * hr;
  const uint32_t T = p.h + p.t + p.c;
  KvChunk out = KvChunk::Zeros({L, H, D, DType::kBF16}, T);
  auto put = [&](uint32_t l, int kv, uint32_t t, uint32_t c, uint16_t bits) {
    auto dst = kv == 0 ? out.MutableK(l) : out.MutableV(l);
    const uint64_t i = 2 * (static_cast<uint64_t>(t) * hr + c);
    dst[i] = static_cast<uint8_t>(bits);
    dst[i + 1] = static_cast<uint8_t>(bits >> 8);
  };
  auto put_raw = [&](uint32_t t, const uint16_t* src) {
    for (uint32_t l = 0; l < L; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (uint32_t c = 0; c < hr; ++c) put(l, kv, t, c, *src++);
  };
  for (uint32_t t = 0; t < p.h; ++t) put_raw(t, p.raw.data() + t * per_token);
  for (uint32_t j = 0; j < p.t; ++j) put_raw(T - p.t + j, p.raw.data() + (p.h + j) * per_token);
  size_t comps = 0;
  for (const auto& g : groups) comps += g.bits.size();
  // Blocks of tokens so that each basis row is read once per block; per value the sum
  // order is still the component order.
  constexpr uint32_t kBlock = 16;
  std::vector<float> x;
  size_t offset = 0;
  for (const auto& g : groups) {
    for (uint32_t r0 = 0; r0 < p.c; r0 += kBlock) {
      const uint32_t nb = std::min(kBlock, p.c - r0);
      x.resize(static_cast<size_t>(nb) * g.dims);
      for (uint32_t b = 0; b < nb; ++b) std::copy(g.mean.begin(), g.mean.end(), x.begin() + static_cast<size_t>(b) * g.dims);
      for (size_t i = 0; i < g.bits.size(); ++i) {
        const float* w = g.basis.data() + i * g.dims;
        for (uint32_t b = 0; b < nb; ++b) {
          const float coef = (static_cast<float>(p.q[(r0 + b) * comps + offset + i]) + 0.5f) * g.step[i];
          float* xr = x.data() + static_cast<size_t>(b) * g.dims;
          for (uint32_t c = 0; c < g.dims; ++c) xr[c] += coef * w[c];
        }
      }
      for (uint32_t b = 0; b < nb; ++b) {
        const uint32_t t = p.h + r0 + b;
        float* xr = x.data() + static_cast<size_t>(b) * g.dims;
        for (uint32_t j = 0; j < g.layers; ++j) {
          float* xk = xr + 2ull * j * hr;
          for (uint32_t h = 0; h < H; ++h) dckv::RotateHead(xk + h * D, D, token_offset + t, theta, false);
          for (uint32_t c = 0; c < hr; ++c) {
            put(g.first_layer + j, 0, t, c, ToBf16(xk[c]));
            put(g.first_layer + j, 1, t, c, ToBf16(xk[hr + c]));
          }
        }
      }
    }
    offset += g.bits.size();
  }
  return out;
}

Result<std::vector<uint8_t>> KvtcCodec::Encode(const KvChunkView& chunk, uint32_t token_offset,
                                               uint32_t prefix_tokens, const Digest256& model_fingerprint) const {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  if (chunk.layout.n_layers != n_layers_ || chunk.layout.n_kv_heads != n_kv_heads_ ||
      chunk.layout.head_dim != head_dim_) {
    return Status::InvalidArgument("kvtc: chunk shape differs from the model's");
  }
  const DType dt = chunk.layout.dtype;
  if (dt != DType::kBF16 && dt != DType::kF32) return Status::InvalidArgument("kvtc: input must be bf16 or f32");
  const uint32_t T = chunk.tokens;
  if (static_cast<uint64_t>(token_offset) + T > prefix_tokens) return Status::InvalidArgument("kvtc: chunk past the prefix");
  const uint32_t hr = n_kv_heads_ * head_dim_;
  Parts p;
  p.h = raw_head_ > token_offset ? std::min(T, raw_head_ - token_offset) : 0;
  const uint32_t tail_start = prefix_tokens > raw_tail_ ? prefix_tokens - raw_tail_ : 0;
  const uint32_t first_tail = std::max(tail_start, token_offset + p.h);
  p.t = token_offset + T > first_tail ? token_offset + T - first_tail : 0;
  p.c = T - p.h - p.t;
  auto raw_row = [&](uint32_t t) {
    for (uint32_t l = 0; l < n_layers_; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (uint32_t c = 0; c < hr; ++c)
          p.raw.push_back(ToBf16(LoadValue(kv == 0 ? chunk.K(l) : chunk.V(l), dt, static_cast<uint64_t>(t) * hr + c)));
  };
  for (uint32_t t = 0; t < p.h; ++t) raw_row(t);
  for (uint32_t t = T - p.t; t < T; ++t) raw_row(t);
  // Projection per group as one GEMM (Eigen); quantised values stored token-major.
  size_t comps = 0;
  for (const auto& g : groups_) comps += g.bits.size();
  p.q.assign(static_cast<size_t>(p.c) * comps, 0);
  size_t offset = 0;
  for (const auto& g : groups_) {
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> x(p.c, g.dims);
    for (uint32_t r = 0; r < p.c; ++r) {
      const uint32_t t = p.h + r;
      float* row = x.data() + static_cast<size_t>(r) * g.dims;
      for (uint32_t j = 0; j < g.layers; ++j) {
        const uint32_t l = g.first_layer + j;
        float* xk = row + 2ull * j * hr;
        for (uint32_t c = 0; c < hr; ++c) {
          xk[c] = LoadValue(chunk.K(l), dt, static_cast<uint64_t>(t) * hr + c);
          xk[hr + c] = LoadValue(chunk.V(l), dt, static_cast<uint64_t>(t) * hr + c);
        }
        for (uint32_t h = 0; h < n_kv_heads_; ++h)
          dckv::RotateHead(xk + h * head_dim_, head_dim_, token_offset + t, rope_theta_, true);
      }
      for (uint32_t c = 0; c < g.dims; ++c) {
        if (!std::isfinite(row[c])) return Status::InvalidArgument("kvtc: non-finite KV value");
        row[c] -= g.mean[c];
      }
    }
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> w(
        g.basis.data(), static_cast<Eigen::Index>(g.bits.size()), g.dims);
    const Eigen::MatrixXf y = x * w.transpose();
    for (uint32_t r = 0; r < p.c; ++r) {
      for (size_t i = 0; i < g.bits.size(); ++i) {
        const double half = std::ldexp(1.0, g.bits[i] - 1);
        p.q[r * comps + offset + i] =
            static_cast<int32_t>(std::clamp(std::floor(static_cast<double>(y(r, i)) / g.step[i]), -half, half - 1));
      }
    }
    offset += g.bits.size();
  }
  BitWriter bw;
  for (uint32_t r = 0; r < p.c; ++r) {
    size_t k = r * comps;
    for (const auto& g : groups_) {
      for (uint8_t b : g.bits) {
        bw.Put(static_cast<uint32_t>(p.q[k++] + (1 << (b - 1))), b);
      }
    }
  }
  bw.Flush();
  const KvChunk decoded = Rebuild(groups_, n_layers_, n_kv_heads_, head_dim_, rope_theta_, token_offset, p);
  std::vector<uint8_t> body;
  ByteWriter w(&body);
  w.U32(p.h);
  w.U32(p.t);
  w.U32(p.c);
  for (uint16_t v : p.raw) w.U16(v);
  w.U64(bw.bytes.size());
  std::vector<uint8_t> z(ZSTD_compressBound(bw.bytes.size()));
  const size_t zn = ZSTD_compress(z.data(), z.size(), bw.bytes.data(), bw.bytes.size(), 3);
  if (ZSTD_isError(zn)) return Status::Internal("kvtc: zstd failed");
  body.insert(body.end(), z.begin(), z.begin() + static_cast<std::ptrdiff_t>(zn));
  PayloadHeader hd;
  hd.codec = CodecId::kKvtc;
  hd.flags = kPayloadFlagLossy;
  hd.layout = {n_layers_, n_kv_heads_, head_dim_, DType::kBF16};
  hd.tokens = T;
  hd.token_offset = token_offset;
  hd.artifact_digest = digest_;
  hd.model_fingerprint = model_fingerprint;
  hd.content_checksum = decoded.ContentChecksum();
  return BuildPayload(hd, body);
}

Result<KvChunk> KvtcCodec::Decode(std::span<const uint8_t> payload, const Digest256& model_fingerprint) const {
  KVSTASH_ASSIGN_OR_RETURN(auto pv, ParsePayload(payload));
  const PayloadHeader& hd = pv.header;
  if (hd.codec != CodecId::kKvtc) return Status::Mismatch("kvtc: payload is another codec's");
  if (hd.artifact_digest != digest_ || hd.model_fingerprint != model_fingerprint) {
    return Status::Mismatch("kvtc: payload was coded for another model or allocation");
  }
  if (!(hd.layout == KvLayout{n_layers_, n_kv_heads_, head_dim_, DType::kBF16})) {
    return Status::Corruption("kvtc: layout differs");
  }
  ByteReader r(pv.body);
  Parts p;
  if (!r.U32(&p.h) || !r.U32(&p.t) || !r.U32(&p.c) ||
      static_cast<uint64_t>(p.h) + p.t + p.c != hd.tokens) {
    return Status::Corruption("kvtc: bad row counts");
  }
  const uint64_t per_token = 2ull * n_layers_ * n_kv_heads_ * head_dim_;
  const uint64_t raw_values = (static_cast<uint64_t>(p.h) + p.t) * per_token;
  if (r.remaining() < raw_values * 2) return Status::Corruption("kvtc: truncated raw rows");
  p.raw.resize(raw_values);
  for (uint16_t& v : p.raw) r.U16(&v);
  uint64_t packed_bytes = 0;
  if (!r.U64(&packed_bytes)) return Status::Corruption("kvtc: truncated");
  const uint64_t bits = BitsPerToken() * p.c;
  if (packed_bytes != (bits + 7) / 8) return Status::Corruption("kvtc: packed size disagrees");
  std::vector<uint8_t> packed(packed_bytes);
  std::span<const uint8_t> z;
  r.Take(r.remaining(), &z);
  const size_t n = ZSTD_decompress(packed.data(), packed.size(), z.data(), z.size());
  if (ZSTD_isError(n) || n != packed_bytes) return Status::Corruption("kvtc: bad zstd frame");
  uint64_t acc = 0;
  int have = 0;
  size_t pos = 0;
  p.q.reserve(p.c * (BitsPerToken() > 0 ? groups_.size() : 0));
  for (uint32_t row = 0; row < p.c; ++row) {
    for (const auto& g : groups_) {
      for (uint8_t b : g.bits) {
        while (have < b) {
          acc |= static_cast<uint64_t>(packed[pos++]) << have;
          have += 8;
        }
        const int32_t half = 1 << (b - 1);
        p.q.push_back(static_cast<int32_t>(acc & ((1u << b) - 1)) - half);
        acc >>= b;
        have -= b;
      }
    }
  }
  KvChunk out = Rebuild(groups_, n_layers_, n_kv_heads_, head_dim_, rope_theta_, hd.token_offset, p);
  if (out.ContentChecksum() != hd.content_checksum) return Status::Corruption("kvtc: content checksum mismatch");
  return out;
}

}  // namespace kvstash::baselines
