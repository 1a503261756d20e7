#include "codec/dckv/dckv_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <Eigen/Dense>

#include "codec/dckv/dckv_rope.h"
#include "codec/entropy/rans_segments.h"
#include "common/byte_io.h"
#include "common/dtype.h"
#include "common/payload_format.h"

namespace kvstash::dckv {
namespace {

constexpr uint32_t kBodyMagic = 0x424B4344;  // "DCKB"
constexpr uint32_t kBodyHeaderBytes = 16;

// Reads value i of a bf16 or f32 tensor.
float LoadValue(std::span<const uint8_t> bytes, DType dtype, uint64_t i) {
  if (dtype == DType::kF32) return std::bit_cast<float>(LoadLe<uint32_t>(bytes.data() + 4 * i));
  return std::bit_cast<float>(static_cast<uint32_t>(LoadLe<uint16_t>(bytes.data() + 2 * i)) << 16);
}

uint16_t ToBf16(float x) {
  uint16_t out = 0;
  (void)ConvertF32ToBf16(std::span<const float>(&x, 1), std::span<uint16_t>(&out, 1));
  return out;
}

}  // namespace

Result<DckvCodec> DckvCodec::Create(DckvArtifact artifact) {
  if (!artifact.tables) return Status::InvalidArgument("dckv: artifact has no tables");
  uint32_t next = 0;
  for (const auto& g : artifact.groups) {
    if (g.first_layer != next || g.dims != 2ull * g.layers * artifact.HeadRow() ||
        g.mean.size() != g.dims || g.basis.size() != static_cast<size_t>(g.n_active()) * g.dims ||
        g.table_index.size() != g.n_active()) {
      return Status::InvalidArgument("dckv: inconsistent artifact group");
    }
    for (uint16_t t : g.table_index) {
      if (t >= artifact.tables->size()) return Status::InvalidArgument("dckv: table index out of range");
    }
    next += g.layers;
  }
  if (next != artifact.n_layers || artifact.head_dim % 2 != 0) {
    return Status::InvalidArgument("dckv: artifact groups do not cover the layers");
  }
  DckvCodec c;
  c.digest_ = artifact.Digest();
  for (const auto& g : artifact.groups) {
    c.token_tables_.insert(c.token_tables_.end(), g.table_index.begin(), g.table_index.end());
  }
  c.artifact_ = std::move(artifact);
  return c;
}

KvLayout DckvCodec::OutputLayout() const {
  return {artifact_.n_layers, artifact_.n_kv_heads, artifact_.head_dim, DType::kBF16};
}

Result<DckvQuantized> DckvCodec::Quantize(const KvChunkView& chunk, uint32_t token_offset,
                                          uint32_t prefix_tokens) const {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  const DckvArtifact& a = artifact_;
  if (chunk.layout.n_layers != a.n_layers || chunk.layout.n_kv_heads != a.n_kv_heads ||
      chunk.layout.head_dim != a.head_dim) {
    return Status::InvalidArgument("dckv: chunk shape differs from the artifact's");
  }
  const DType dt = chunk.layout.dtype;
  if (dt != DType::kBF16 && dt != DType::kF32) return Status::InvalidArgument("dckv: input must be bf16 or f32");
  const uint32_t T = chunk.tokens;
  if (static_cast<uint64_t>(token_offset) + T > prefix_tokens) {
    return Status::InvalidArgument("dckv: chunk extends past the prefix");
  }
  DckvQuantized q;
  q.tokens = T;
  q.raw_head_rows = a.raw_head > token_offset ? std::min(T, a.raw_head - token_offset) : 0;
  const uint32_t tail_start = prefix_tokens > a.raw_tail ? prefix_tokens - a.raw_tail : 0;
  const uint32_t first_tail = std::max(tail_start, token_offset + q.raw_head_rows);
  q.raw_tail_rows = token_offset + T > first_tail ? token_offset + T - first_tail : 0;
  const uint32_t hr = a.HeadRow();
  const uint64_t per_token = 2ull * a.n_layers * hr;
  // Raw rows, canonical values rounded to bf16.
  auto raw_row = [&](uint32_t t) {
    for (uint32_t l = 0; l < a.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        auto src = kv == 0 ? chunk.K(l) : chunk.V(l);
        for (uint32_t c = 0; c < hr; ++c) {
          q.raw_bf16.push_back(ToBf16(LoadValue(src, dt, static_cast<uint64_t>(t) * hr + c)));
        }
      }
    }
  };
  q.raw_bf16.reserve((q.raw_head_rows + q.raw_tail_rows) * per_token);
  for (uint32_t t = 0; t < q.raw_head_rows; ++t) raw_row(t);
  for (uint32_t t = T - q.raw_tail_rows; t < T; ++t) raw_row(t);

  const uint64_t A = token_tables_.size();
  const uint32_t R = q.coded_rows();
  q.symbols.resize(static_cast<size_t>(R) * A);
  // Projection y = (x - mean) W^T per group as one GEMM (Eigen). The encoder need not
  // be bit-reproducible: the decoder only sees the symbols.
  uint64_t group_offset = 0;
  for (const auto& g : a.groups) {
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> x(R, g.dims);
    for (uint32_t r = 0; r < R; ++r) {
      const uint32_t t = q.raw_head_rows + r;
      float* row = x.data() + static_cast<size_t>(r) * g.dims;
      for (uint32_t j = 0; j < g.layers; ++j) {
        const uint32_t l = g.first_layer + j;
        float* xk = row + 2ull * j * hr;
        float* xv = xk + hr;
        for (uint32_t c = 0; c < hr; ++c) {
          xk[c] = LoadValue(chunk.K(l), dt, static_cast<uint64_t>(t) * hr + c);
          xv[c] = LoadValue(chunk.V(l), dt, static_cast<uint64_t>(t) * hr + c);
        }
        for (uint32_t h = 0; h < a.n_kv_heads; ++h) {
          RotateHead(xk + h * a.head_dim, a.head_dim, token_offset + t, a.rope_theta, true);
        }
      }
      for (uint32_t c = 0; c < g.dims; ++c) {
        if (!std::isfinite(row[c])) return Status::InvalidArgument("dckv: non-finite KV value");
        row[c] -= g.mean[c];
      }
    }
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> w(
        g.basis.data(), g.n_active(), g.dims);
    const Eigen::MatrixXf y = x * w.transpose();  // [R, n_active]
    for (uint32_t r = 0; r < R; ++r) {
      for (uint32_t i = 0; i < g.n_active(); ++i) {
        const double v = std::clamp(std::nearbyint(static_cast<double>(y(r, i)) / g.step[i]), -32767.0, 32767.0);
        q.symbols[r * A + group_offset + i] = static_cast<uint16_t>(static_cast<int16_t>(v));
      }
    }
    group_offset += g.n_active();
  }
  return q;
}

Result<KvChunk> DckvCodec::Reconstruct(const DckvQuantized& q, uint32_t token_offset) const {
  const DckvArtifact& a = artifact_;
  const uint32_t hr = a.HeadRow();
  const uint64_t per_token = 2ull * a.n_layers * hr;
  const uint64_t A = token_tables_.size();
  if (q.tokens == 0 || q.raw_head_rows + q.raw_tail_rows > q.tokens ||
      q.raw_bf16.size() != (q.raw_head_rows + q.raw_tail_rows) * per_token ||
      q.symbols.size() != static_cast<size_t>(q.coded_rows()) * A) {
    return Status::InvalidArgument("dckv: inconsistent quantised chunk");
  }
  KvChunk out = KvChunk::Zeros(OutputLayout(), q.tokens);
  auto put = [&](uint32_t l, int kv, uint32_t t, uint32_t c, uint16_t bits) {
    auto dst = kv == 0 ? out.MutableK(l) : out.MutableV(l);
    const uint64_t i = 2 * (static_cast<uint64_t>(t) * hr + c);
    dst[i] = static_cast<uint8_t>(bits);
    dst[i + 1] = static_cast<uint8_t>(bits >> 8);
  };
  auto put_raw = [&](uint32_t t, const uint16_t* src) {
    for (uint32_t l = 0; l < a.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (uint32_t c = 0; c < hr; ++c) put(l, kv, t, c, *src++);
      }
    }
  };
  for (uint32_t t = 0; t < q.raw_head_rows; ++t) put_raw(t, q.raw_bf16.data() + t * per_token);
  for (uint32_t j = 0; j < q.raw_tail_rows; ++j) {
    put_raw(q.tokens - q.raw_tail_rows + j, q.raw_bf16.data() + (q.raw_head_rows + j) * per_token);
  }
  // Blocks of kBlock tokens: each basis row is read once per block. Every output
  // value is still mean + sum_i coef_i w_i accumulated in component order, so the
  // result does not depend on the blocking.
  constexpr uint32_t kBlock = 16;
  std::vector<float> x;
  uint64_t group_offset = 0;
  for (const auto& g : a.groups) {
    for (uint32_t r0 = 0; r0 < q.coded_rows(); r0 += kBlock) {
      const uint32_t nb = std::min(kBlock, q.coded_rows() - r0);
      x.resize(static_cast<size_t>(nb) * g.dims);
      for (uint32_t b = 0; b < nb; ++b) std::copy(g.mean.begin(), g.mean.end(), x.begin() + static_cast<size_t>(b) * g.dims);
      for (uint32_t i = 0; i < g.n_active(); ++i) {
        const float* w = g.basis.data() + static_cast<size_t>(i) * g.dims;
        for (uint32_t b = 0; b < nb; ++b) {
          const int16_t sym = static_cast<int16_t>(q.symbols[(r0 + b) * A + group_offset + i]);
          if (sym == 0) continue;
          const float coef = static_cast<float>(sym) * g.step[i];
          float* xr = x.data() + static_cast<size_t>(b) * g.dims;
          for (uint32_t c = 0; c < g.dims; ++c) xr[c] += coef * w[c];
        }
      }
      for (uint32_t b = 0; b < nb; ++b) {
        const uint32_t t = q.raw_head_rows + r0 + b;
        float* xr = x.data() + static_cast<size_t>(b) * g.dims;
        for (uint32_t j = 0; j < g.layers; ++j) {
          const uint32_t l = g.first_layer + j;
          float* xk = xr + 2ull * j * hr;
          for (uint32_t h = 0; h < a.n_kv_heads; ++h) {
            RotateHead(xk + h * a.head_dim, a.head_dim, token_offset + t, a.rope_theta, false);
          }
          for (uint32_t c = 0; c < hr; ++c) {
            put(l, 0, t, c, ToBf16(xk[c]));
            put(l, 1, t, c, ToBf16(xk[hr + c]));
          }
        }
      }
    }
    group_offset += g.n_active();
  }
  return out;
}

Result<std::vector<uint8_t>> DckvCodec::Encode(const KvChunkView& chunk, uint32_t token_offset,
                                               uint32_t prefix_tokens,
                                               const Digest256& model_fingerprint) const {
  KVSTASH_ASSIGN_OR_RETURN(auto q, Quantize(chunk, token_offset, prefix_tokens));
  KVSTASH_ASSIGN_OR_RETURN(auto decoded, Reconstruct(q, token_offset));
  std::vector<uint8_t> body;
  ByteWriter w(&body);
  w.U32(kBodyMagic);
  w.U32(q.raw_head_rows);
  w.U32(q.raw_tail_rows);
  w.U32(q.coded_rows());
  for (uint16_t v : q.raw_bf16) w.U16(v);
  if (!q.symbols.empty()) {
    std::vector<uint16_t> index(q.symbols.size());
    for (size_t i = 0; i < index.size(); ++i) index[i] = token_tables_[i % token_tables_.size()];
    KVSTASH_RETURN_IF_ERROR(entropy::RansEncodeSegmentedAppend(
        q.symbols, index, *artifact_.tables, entropy::kDefaultSegmentSymbols, &body));
  }
  PayloadHeader h;
  h.codec = CodecId::kDckv;
  h.flags = kPayloadFlagLossy;
  h.layout = OutputLayout();
  h.tokens = chunk.tokens;
  h.token_offset = token_offset;
  h.artifact_digest = digest_;
  h.model_fingerprint = model_fingerprint;
  h.content_checksum = decoded.ContentChecksum();
  return BuildPayload(h, body);
}

Result<DckvQuantized> DckvCodec::ParsePayload(std::span<const uint8_t> payload,
                                              const Digest256& model_fingerprint,
                                              uint32_t* token_offset) const {
  KVSTASH_ASSIGN_OR_RETURN(auto pv, kvstash::ParsePayload(payload));
  const PayloadHeader& h = pv.header;
  if (h.codec != CodecId::kDckv) return Status::Mismatch("dckv: payload is another codec's");
  if (h.artifact_digest != digest_) return Status::Mismatch("dckv: payload was coded with another artifact");
  if (h.model_fingerprint != model_fingerprint) return Status::Mismatch("dckv: payload is another model's");
  if (!(h.layout == OutputLayout())) return Status::Corruption("dckv: payload layout differs from the artifact's");
  ByteReader r(pv.body);
  uint32_t magic = 0;
  DckvQuantized q;
  q.tokens = h.tokens;
  uint32_t coded = 0;
  if (!r.U32(&magic) || magic != kBodyMagic || !r.U32(&q.raw_head_rows) ||
      !r.U32(&q.raw_tail_rows) || !r.U32(&coded)) {
    return Status::Corruption("dckv: bad body header");
  }
  const uint32_t expected_head =
      artifact_.raw_head > h.token_offset ? std::min(h.tokens, artifact_.raw_head - h.token_offset) : 0;
  if (q.raw_head_rows != expected_head || q.raw_tail_rows > h.tokens - q.raw_head_rows ||
      static_cast<uint64_t>(q.raw_head_rows) + q.raw_tail_rows + coded != h.tokens) {
    return Status::Corruption("dckv: raw/coded row counts disagree with the header");
  }
  const uint64_t per_token = 2ull * artifact_.n_layers * artifact_.HeadRow();
  const uint64_t raw_values = (static_cast<uint64_t>(q.raw_head_rows) + q.raw_tail_rows) * per_token;
  if (r.remaining() < raw_values * 2) return Status::Corruption("dckv: truncated raw rows");
  q.raw_bf16.resize(raw_values);
  for (uint16_t& v : q.raw_bf16) r.U16(&v);
  std::span<const uint8_t> stream;
  r.Take(r.remaining(), &stream);
  q.symbols.resize(static_cast<size_t>(coded) * token_tables_.size());
  if (q.symbols.empty()) {
    if (!stream.empty()) return Status::Corruption("dckv: trailing bytes after the raw rows");
  } else {
    std::vector<uint16_t> index(q.symbols.size());
    for (size_t i = 0; i < index.size(); ++i) index[i] = token_tables_[i % token_tables_.size()];
    Status st = entropy::RansDecodeSegmented(stream, index, *artifact_.tables, q.symbols);
    if (!st.ok()) return Status::Corruption("dckv: " + st.ToString());
  }
  if (token_offset) *token_offset = h.token_offset;
  return q;
}

Result<KvChunk> DckvCodec::Decode(std::span<const uint8_t> payload,
                                  const Digest256& model_fingerprint) const {
  uint32_t offset = 0;
  KVSTASH_ASSIGN_OR_RETURN(auto q, ParsePayload(payload, model_fingerprint, &offset));
  KVSTASH_ASSIGN_OR_RETURN(auto chunk, Reconstruct(q, offset));
  KVSTASH_ASSIGN_OR_RETURN(auto header, ParsePayloadHeader(payload));
  if (chunk.ContentChecksum() != header.content_checksum) {
    return Status::Corruption("dckv: decoded content checksum mismatch");
  }
  return chunk;
}

}  // namespace kvstash::dckv
