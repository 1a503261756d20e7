#include "codec/dckv/dckv_codec.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <thread>

#include "codec/dckv/dckv_conditional.h"
#include "codec/dckv/dckv_correction.h"
#include "codec/dckv/dckv_fp8_output.h"
#include "codec/dckv/dckv_rope.h"
#include "codec/entropy/rans_segments.h"
#include "common/byte_io.h"
#include "kvstash/dtype.h"
#include "kvstash/payload_format.h"
#include "numerics/parallel_for.h"

namespace kvstash::dckv {
namespace {

constexpr uint32_t kBodyMagic = 0x424B4344;  // "DCKB"
constexpr uint32_t kFlagTokenIds = 1;

// Reads value i of a bf16, f16 or f32 tensor.
float LoadValue(std::span<const uint8_t> bytes, DType dtype, uint64_t i) {
  if (dtype == DType::kF32) return std::bit_cast<float>(LoadLe<uint32_t>(bytes.data() + 4 * i));
  if (dtype == DType::kF16) return F16ToF32(LoadLe<uint16_t>(bytes.data() + 2 * i));
  return std::bit_cast<float>(static_cast<uint32_t>(LoadLe<uint16_t>(bytes.data() + 2 * i)) << 16);
}

// z of every coded row [rows, rank]: the reduced embeddings, zeros without ids.
std::vector<float> TokenRows(const DckvConditioning& cond, const std::vector<uint32_t>& ids, uint32_t rows) {
  std::vector<float> z(static_cast<size_t>(rows) * cond.rank, 0.0f);
  for (size_t r = 0; r < ids.size(); ++r) {
    TokenEmbedding(cond, ids[r], std::span<float>(z.data() + r * cond.rank, cond.rank));
  }
  return z;
}

// x rounded to nearest even in the 16-bit output dtype (bf16 or f16).
uint16_t To16(float x, DType out) { return out == DType::kF16 ? F32ToF16(x) : F32ToBf16(x); }

// Rounds row[0, n) to the 16-bit output dtype (To16) and writes the values
// little-endian to dst[0, 2n). The bf16 rounding is F32ToBf16 written without a branch
// (a NaN keeps its top bits with the quiet bit set, anything else rounds to nearest
// even), 16 values at a time into a local block, so that the compiler vectorises it.
void Store16(const float* row, uint32_t n, DType out, uint8_t* dst) {
  constexpr uint32_t B = 16;
  uint16_t block[B];
  auto put = [&](uint32_t c, uint32_t count) {
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(dst + 2 * c, block, 2 * count);
    } else {
      for (uint32_t k = 0; k < count; ++k) StoreLe<uint16_t>(dst + 2 * (c + k), block[k]);
    }
  };
  auto bf16 = [](float value) {
    const uint32_t x = std::bit_cast<uint32_t>(value);
    const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16, quiet_nan = (x >> 16) | 0x0040u;
    return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  };
  for (uint32_t c = 0; c < n; c += B) {
    const uint32_t count = std::min(B, n - c);
    if (out == DType::kF16) {
      for (uint32_t k = 0; k < count; ++k) block[k] = F32ToF16(row[c + k]);
    } else if (count == B) {
      for (uint32_t k = 0; k < B; ++k) block[k] = bf16(row[c + k]);
    } else {
      for (uint32_t k = 0; k < count; ++k) block[k] = bf16(row[c + k]);
    }
    put(c, count);
  }
}

// Rows of one synthesis / projection task.
constexpr uint32_t kRowsPerTask = 32;

}  // namespace

Result<DckvCodec> DckvCodec::Create(DckvArtifact artifact) {
  if (!artifact.tables) return Status::InvalidArgument("dckv: artifact has no tables");
  uint32_t next = 0;
  for (const auto& g : artifact.groups) {
    if (g.first_layer != next || g.dims != 2ull * g.layers * artifact.HeadRow() || g.mean.size() != g.dims ||
        (!g.encode_scale.empty() && g.encode_scale.size() != g.dims) ||
        (!g.encoder_basis.empty() &&
         (g.encoder_basis.size() != static_cast<size_t>(g.n_active()) * g.dims || !g.encode_scale.empty())) ||
        g.basis.size() != static_cast<size_t>(g.n_active()) * g.dims ||
        g.table_index.size() != g.n_active() || g.odd_table_index.size() != g.n_active() ||
        g.token_map.size() != static_cast<size_t>(artifact.conditioning.rank + 1) * g.n_active() ||
        g.context_inputs > g.n_active() || (g.context_inputs == 0) != g.context_map.empty() ||
        g.context_map.size() != static_cast<size_t>(g.context_inputs == 0
                                                        ? 0
                                                        : g.context_inputs + artifact.conditioning.rank + 1) *
                                    g.n_active()) {
      return Status::InvalidArgument("dckv: inconsistent artifact group");
    }
    KVSTASH_RETURN_IF_ERROR(CheckCorrectionNets(g));
    for (uint16_t t : g.table_index) {
      if (t >= artifact.tables->size()) return Status::InvalidArgument("dckv: table index out of range");
    }
    for (uint16_t t : g.odd_table_index) {
      if (t >= artifact.tables->size()) return Status::InvalidArgument("dckv: table index out of range");
    }
    next += g.layers;
  }
  if (next != artifact.n_layers || artifact.head_dim % 2 != 0) {
    return Status::InvalidArgument("dckv: artifact groups do not cover the layers");
  }
  const DckvConditioning& cond = artifact.conditioning;
  if (cond.embed_bf16.size() != static_cast<size_t>(cond.vocab) * cond.rank || (cond.rank > 0) != (cond.vocab > 0)) {
    return Status::InvalidArgument("dckv: inconsistent conditioning embeddings");
  }
  DckvCodec c;
  c.digest_ = artifact.Digest();
  c.threads_ = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  for (const auto& g : artifact.groups) {
    c.even_tables_.insert(c.even_tables_.end(), g.table_index.begin(), g.table_index.end());
    c.odd_tables_.insert(c.odd_tables_.end(), g.odd_table_index.begin(), g.odd_table_index.end());
    c.packed_.push_back(PackBasis(g.basis, g.n_active(), g.dims));
    c.packed_nets_.push_back(g.decoder_net.empty() ? PackedDecoderNet{}
                                                   : PackDecoderNet(g.decoder_net, g.n_active(), g.dims));
  }
  c.artifact_ = std::move(artifact);
  return c;
}

KvLayout DckvCodec::OutputLayout(DType dtype) const {
  return {artifact_.n_layers, artifact_.n_kv_heads, artifact_.head_dim, dtype};
}

std::vector<uint16_t> DckvCodec::SymbolTables(uint32_t coded_rows) const {
  std::vector<uint16_t> index;
  index.reserve(static_cast<size_t>(coded_rows) * even_tables_.size());
  for (uint32_t r = 0; r < coded_rows; ++r) {
    const auto& t = r % 2 == 0 ? even_tables_ : odd_tables_;
    index.insert(index.end(), t.begin(), t.end());
  }
  return index;
}

void DckvCodec::CodeGroup(size_t group, uint64_t symbol_offset, const std::vector<float>& z, uint32_t rows,
                          const float* y, uint16_t* symbols, std::vector<float>* c) const {
  const DckvGroup& g = artifact_.groups[group];
  const uint32_t rank = artifact_.conditioning.rank;
  const uint32_t na = g.n_active();
  const uint64_t stride = even_tables_.size();
  c->assign(static_cast<size_t>(rows) * na, 0.0f);
  // Rows of one parity in batches (dckv_conditional.h PredictRows: the same values as
  // one row at a time).
  constexpr uint32_t kBatch = 8;
  std::vector<float> u, mu(static_cast<size_t>(kBatch) * na);
  for (uint32_t parity = 0; parity < 2; ++parity) {
    const bool context = parity == 1 && !g.context_map.empty();
    const uint32_t k = context ? g.context_inputs : 0;
    const uint32_t inputs = k + rank;
    const std::vector<float>& map = context ? g.context_map : g.token_map;
    u.resize(static_cast<size_t>(kBatch) * inputs);
    for (uint32_t r0 = parity; r0 < rows; r0 += 2 * kBatch) {
      const uint32_t nb = std::min(kBatch, (rows - r0 + 1) / 2);
      for (uint32_t b = 0; b < nb; ++b) {
        const uint32_t r = r0 + 2 * b;
        float* ub = u.data() + static_cast<size_t>(b) * inputs;
        if (context) {
          const float* prev = c->data() + static_cast<size_t>(r - 1) * na;
          const float* next = r + 1 < rows ? prev + 2 * static_cast<size_t>(na) : nullptr;
          for (uint32_t j = 0; j < k; ++j) ub[j] = next == nullptr ? prev[j] : 0.5f * (prev[j] + next[j]);
        }
        std::copy_n(z.data() + static_cast<size_t>(r) * rank, rank, ub + k);
      }
      PredictRows(map, inputs, na, std::span<const float>(u).first(static_cast<size_t>(nb) * inputs), nb, mu);
      for (uint32_t b = 0; b < nb; ++b) {
        const uint32_t r = r0 + 2 * b;
        const float* mb = mu.data() + static_cast<size_t>(b) * na;
        float* cr = c->data() + static_cast<size_t>(r) * na;
        uint16_t* sym = symbols + r * stride + symbol_offset;
        for (uint32_t i = 0; i < na; ++i) {
          if (y != nullptr) {
            const float residual = y[static_cast<size_t>(r) * na + i] - mb[i];
            const double v = std::clamp(std::nearbyint(static_cast<double>(residual) / g.step[i]), -32767.0, 32767.0);
            sym[i] = static_cast<uint16_t>(static_cast<int16_t>(v));
          }
          cr[i] = mb[i] + static_cast<float>(static_cast<int16_t>(sym[i])) * g.step[i];
        }
      }
    }
  }
}

Result<DckvQuantized> DckvCodec::Quantize(const KvChunkView& chunk, std::span<const uint32_t> tokens,
                                          uint32_t token_offset, uint32_t prefix_tokens) const {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  const DckvArtifact& a = artifact_;
  if (chunk.layout.n_layers != a.n_layers || chunk.layout.n_kv_heads != a.n_kv_heads ||
      chunk.layout.head_dim != a.head_dim) {
    return Status::InvalidArgument("dckv: chunk shape differs from the artifact's");
  }
  const DType dt = chunk.layout.dtype;
  if (dt != DType::kBF16 && dt != DType::kF16 && dt != DType::kF32) {
    return Status::InvalidArgument("dckv: input must be bf16, f16 or f32");
  }
  const uint32_t T = chunk.tokens;
  if (static_cast<uint64_t>(token_offset) + T > prefix_tokens) {
    return Status::InvalidArgument("dckv: chunk extends past the prefix");
  }
  if (!tokens.empty() && tokens.size() != T) {
    return Status::InvalidArgument("dckv: token id count differs from the chunk's tokens");
  }
  DckvQuantized q;
  q.tokens = T;
  q.out_dtype = dt == DType::kF16 ? DType::kF16 : DType::kBF16;
  q.raw_head_rows = a.raw_head > token_offset ? std::min(T, a.raw_head - token_offset) : 0;
  const uint32_t tail_start = prefix_tokens > a.raw_tail ? prefix_tokens - a.raw_tail : 0;
  const uint32_t first_tail = std::max(tail_start, token_offset + q.raw_head_rows);
  q.raw_tail_rows = token_offset + T > first_tail ? token_offset + T - first_tail : 0;
  const uint32_t hr = a.HeadRow();
  const uint64_t per_token = 2ull * a.n_layers * hr;
  // Raw rows, canonical values in the output dtype (exact for bf16 and f16 input).
  auto raw_row = [&](uint32_t t) {
    for (uint32_t l = 0; l < a.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        auto src = kv == 0 ? chunk.K(l) : chunk.V(l);
        for (uint32_t c = 0; c < hr; ++c) {
          q.raw_bf16.push_back(To16(LoadValue(src, dt, static_cast<uint64_t>(t) * hr + c), q.out_dtype));
        }
      }
    }
  };
  q.raw_bf16.reserve((q.raw_head_rows + q.raw_tail_rows) * per_token);
  for (uint32_t t = 0; t < q.raw_head_rows; ++t) raw_row(t);
  for (uint32_t t = T - q.raw_tail_rows; t < T; ++t) raw_row(t);

  const uint64_t A = even_tables_.size();
  const uint32_t R = q.coded_rows();
  q.symbols.resize(static_cast<size_t>(R) * A);
  if (!tokens.empty() && a.conditioning.rank > 0) {
    q.token_ids.assign(tokens.begin() + q.raw_head_rows, tokens.begin() + q.raw_head_rows + R);
    for (uint32_t id : q.token_ids) {
      if (id >= a.conditioning.vocab) return Status::InvalidArgument("dckv: token id outside the artifact's vocabulary");
    }
  }
  const std::vector<float> z = TokenRows(a.conditioning, q.token_ids, R);
  if (R == 0) return q;
  // Rows of every group: K rotated back to before RoPE, minus the mean (tasks of
  // kRowsPerTask rows of one group).
  const RopeTable rope(a.head_dim, a.rope_theta, token_offset + q.raw_head_rows, R);
  const size_t G = a.groups.size();
  const uint32_t blocks = (R + kRowsPerTask - 1) / kRowsPerTask;
  std::vector<std::vector<float>> x(G);
  for (size_t gi = 0; gi < G; ++gi) x[gi].resize(static_cast<size_t>(R) * a.groups[gi].dims);
  std::atomic<bool> finite{true};
  numerics::ParallelFor(static_cast<uint32_t>(G * blocks), threads_, [&](uint32_t, size_t task) {
    const DckvGroup& g = a.groups[task / blocks];
    const uint32_t r0 = static_cast<uint32_t>(task % blocks) * kRowsPerTask;
    const uint32_t r1 = std::min(R, r0 + kRowsPerTask);
    for (uint32_t r = r0; r < r1; ++r) {
      const uint32_t t = q.raw_head_rows + r;
      float* row = x[task / blocks].data() + static_cast<size_t>(r) * g.dims;
      for (uint32_t j = 0; j < g.layers; ++j) {
        const uint32_t l = g.first_layer + j;
        float* xk = row + 2ull * j * hr;
        float* xv = xk + hr;
        for (uint32_t c = 0; c < hr; ++c) {
          xk[c] = LoadValue(chunk.K(l), dt, static_cast<uint64_t>(t) * hr + c);
          xv[c] = LoadValue(chunk.V(l), dt, static_cast<uint64_t>(t) * hr + c);
        }
        for (uint32_t h = 0; h < a.n_kv_heads; ++h) rope.Rotate(xk + h * a.head_dim, token_offset + t, true);
      }
      for (uint32_t c = 0; c < g.dims; ++c) {
        if (!std::isfinite(row[c])) finite = false;
        row[c] -= g.mean[c];
        if (!g.encode_scale.empty()) row[c] *= g.encode_scale[c];
      }
    }
  });
  if (!finite) return Status::InvalidArgument("dckv: non-finite KV value");
  // Projection y = (x - mean) W^T per group [R, n_active] as one GEMM (OpenBLAS, its
  // own threads; W the encoder basis when the group has one, else the basis), plus the
  // encoder correction net when the group has one. The encoder need not be
  // bit-reproducible: the decoder only sees the symbols.
  std::vector<std::vector<float>> y(G);
  for (size_t gi = 0; gi < G; ++gi) {
    const DckvGroup& g = a.groups[gi];
    y[gi].resize(static_cast<size_t>(R) * g.n_active());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(R), static_cast<int>(g.n_active()),
                static_cast<int>(g.dims), 1.0f, x[gi].data(), static_cast<int>(g.dims),
                g.encoder_basis.empty() ? g.basis.data() : g.encoder_basis.data(), static_cast<int>(g.dims),
                0.0f, y[gi].data(), static_cast<int>(g.n_active()));
    if (!g.encoder_net.empty()) AddEncoderCorrection(g.encoder_net, g.dims, g.n_active(), x[gi], R, y[gi]);
  }
  std::vector<uint64_t> group_offset(G, 0);
  for (size_t gi = 1; gi < G; ++gi) group_offset[gi] = group_offset[gi - 1] + a.groups[gi - 1].n_active();
  numerics::ParallelFor(static_cast<uint32_t>(G), threads_, [&](uint32_t, size_t gi) {
    std::vector<float> coef;
    CodeGroup(gi, group_offset[gi], z, R, y[gi].data(), q.symbols.data(), &coef);
  });
  return q;
}

Result<KvChunk> DckvCodec::Reconstruct(const DckvQuantized& q, uint32_t token_offset) const {
  const DckvArtifact& a = artifact_;
  const uint32_t hr = a.HeadRow();
  const uint64_t per_token = 2ull * a.n_layers * hr;
  const uint64_t A = even_tables_.size();
  if (q.tokens == 0 || q.raw_head_rows + q.raw_tail_rows > q.tokens ||
      q.raw_bf16.size() != (q.raw_head_rows + q.raw_tail_rows) * per_token ||
      q.symbols.size() != static_cast<size_t>(q.coded_rows()) * A ||
      (!q.token_ids.empty() && q.token_ids.size() != q.coded_rows()) ||
      (q.out_dtype != DType::kBF16 && q.out_dtype != DType::kF16)) {
    return Status::InvalidArgument("dckv: inconsistent quantised chunk");
  }
  for (uint32_t id : q.token_ids) {
    if (id >= a.conditioning.vocab) return Status::InvalidArgument("dckv: token id outside the artifact's vocabulary");
  }
  KvChunk out = KvChunk::Zeros(OutputLayout(q.out_dtype), q.tokens);
  // Writes 16-bit values row[0, hr) as position t of layer l's K (kv 0) or V (kv 1).
  auto put_row = [&](uint32_t l, int kv, uint32_t t, const uint16_t* row) {
    const std::span<uint8_t> dst = kv == 0 ? out.MutableK(l) : out.MutableV(l);
    uint8_t* p = dst.data() + 2 * static_cast<uint64_t>(t) * hr;
    for (uint32_t c = 0; c < hr; ++c) {
      p[2 * c] = static_cast<uint8_t>(row[c]);
      p[2 * c + 1] = static_cast<uint8_t>(row[c] >> 8);
    }
  };
  auto put_raw = [&](uint32_t t, const uint16_t* src) {
    for (uint32_t l = 0; l < a.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv, src += hr) put_row(l, kv, t, src);
    }
  };
  for (uint32_t t = 0; t < q.raw_head_rows; ++t) put_raw(t, q.raw_bf16.data() + t * per_token);
  for (uint32_t j = 0; j < q.raw_tail_rows; ++j) {
    put_raw(q.tokens - q.raw_tail_rows + j, q.raw_bf16.data() + (q.raw_head_rows + j) * per_token);
  }
  const uint32_t R = q.coded_rows();
  if (R == 0) return out;
  // Passes 1 and 2 (dckv_conditional.h), one task per group.
  const std::vector<float> z = TokenRows(a.conditioning, q.token_ids, R);
  const size_t G = a.groups.size();
  std::vector<std::vector<float>> coef(G);
  std::vector<uint64_t> group_offset(G, 0);
  for (size_t gi = 1; gi < G; ++gi) group_offset[gi] = group_offset[gi - 1] + a.groups[gi - 1].n_active();
  // CodeGroup only reads the symbols when y is null.
  uint16_t* symbols = const_cast<uint16_t*>(q.symbols.data());
  numerics::ParallelFor(static_cast<uint32_t>(G), threads_, [&](uint32_t, size_t gi) {
    CodeGroup(gi, group_offset[gi], z, R, nullptr, symbols, &coef[gi]);
  });
  // Synthesis, RoPE and rounding to the output dtype, one task per kRowsPerTask rows of
  // one group.
  const RopeTable rope(a.head_dim, a.rope_theta, token_offset + q.raw_head_rows, R);
  const uint32_t blocks = (R + kRowsPerTask - 1) / kRowsPerTask;
  numerics::ParallelFor(static_cast<uint32_t>(G * blocks), threads_, [&](uint32_t, size_t task) {
    const size_t gi = task / blocks;
    const DckvGroup& g = a.groups[gi];
    const uint32_t r0 = static_cast<uint32_t>(task % blocks) * kRowsPerTask;
    const uint32_t nb = std::min(kRowsPerTask, R - r0);
    std::vector<float> x(static_cast<size_t>(nb) * g.dims);
    const auto block_coef = std::span<const float>(coef[gi]).subspan(static_cast<size_t>(r0) * g.n_active());
    SynthesizeRows(packed_[gi], g.mean, block_coef, nb, x);
    if (!g.decoder_net.empty()) ApplyDecoderCorrection(packed_nets_[gi], g.decoder_net, block_coef, nb, x);
    for (uint32_t b = 0; b < nb; ++b) {
      const uint32_t t = q.raw_head_rows + r0 + b;
      float* xr = x.data() + static_cast<size_t>(b) * g.dims;
      for (uint32_t j = 0; j < g.layers; ++j) {
        const uint32_t l = g.first_layer + j;
        float* xk = xr + 2ull * j * hr;
        for (uint32_t h = 0; h < a.n_kv_heads; ++h) rope.Rotate(xk + h * a.head_dim, token_offset + t, false);
        Store16(xk, hr, q.out_dtype, out.MutableK(l).data() + 2 * static_cast<uint64_t>(t) * hr);
        Store16(xk + hr, hr, q.out_dtype, out.MutableV(l).data() + 2 * static_cast<uint64_t>(t) * hr);
      }
    }
  });
  return out;
}

Result<std::vector<uint8_t>> DckvCodec::Encode(const KvChunkView& chunk, std::span<const uint32_t> tokens,
                                               uint32_t token_offset, uint32_t prefix_tokens,
                                               const Digest256& model_fingerprint) const {
  KVSTASH_ASSIGN_OR_RETURN(auto q, Quantize(chunk, tokens, token_offset, prefix_tokens));
  KVSTASH_ASSIGN_OR_RETURN(auto decoded, Reconstruct(q, token_offset));
  std::vector<uint8_t> body;
  ByteWriter w(&body);
  w.U32(kBodyMagic);
  w.U32(q.raw_head_rows);
  w.U32(q.raw_tail_rows);
  w.U32(q.coded_rows());
  w.U32(q.token_ids.empty() ? 0u : kFlagTokenIds);
  for (uint32_t id : q.token_ids) {
    if (WideTokenIds()) w.U32(id); else w.U16(static_cast<uint16_t>(id));
  }
  for (uint16_t v : q.raw_bf16) w.U16(v);
  if (!q.symbols.empty()) {
    const std::vector<uint16_t> index = SymbolTables(q.coded_rows());
    KVSTASH_RETURN_IF_ERROR(entropy::RansEncodeSegmentedAppend(
        q.symbols, index, *artifact_.tables, entropy::kDefaultSegmentSymbols, &body));
  }
  PayloadHeader h;
  h.codec = CodecId::kDckv;
  h.flags = kPayloadFlagLossy;
  h.layout = OutputLayout(q.out_dtype);
  h.tokens = chunk.tokens;
  h.token_offset = token_offset;
  h.artifact_digest = digest_;
  h.model_fingerprint = model_fingerprint;
  h.content_checksum = decoded.ContentChecksum();
  return BuildPayload(h, body);
}

Result<DckvParsedPayload> DckvCodec::SplitPayload(std::span<const uint8_t> payload,
                                                  const Digest256& model_fingerprint) const {
  KVSTASH_ASSIGN_OR_RETURN(auto pv, kvstash::ParsePayload(payload));
  const PayloadHeader& h = pv.header;
  if (h.codec != CodecId::kDckv) return Status::Mismatch("dckv: payload is another codec's");
  if (h.artifact_digest != digest_) return Status::Mismatch("dckv: payload was coded with another artifact");
  if (h.model_fingerprint != model_fingerprint) return Status::Mismatch("dckv: payload is another model's");
  if (!(h.layout == OutputLayout(DType::kBF16)) && !(h.layout == OutputLayout(DType::kF16))) {
    return Status::Corruption("dckv: payload layout differs from the artifact's");
  }
  ByteReader r(pv.body);
  uint32_t magic = 0;
  DckvParsedPayload parsed;
  parsed.token_offset = h.token_offset;
  parsed.content_checksum = h.content_checksum;
  DckvQuantized& q = parsed.q;
  q.tokens = h.tokens;
  q.out_dtype = h.layout.dtype;
  uint32_t coded = 0, flags = 0;
  if (!r.U32(&magic) || magic != kBodyMagic || !r.U32(&q.raw_head_rows) ||
      !r.U32(&q.raw_tail_rows) || !r.U32(&coded) || !r.U32(&flags)) {
    return Status::Corruption("dckv: bad body header");
  }
  if ((flags & ~kFlagTokenIds) != 0 || ((flags & kFlagTokenIds) && artifact_.conditioning.rank == 0)) {
    return Status::Corruption("dckv: bad body flags");
  }
  const uint32_t expected_head =
      artifact_.raw_head > h.token_offset ? std::min(h.tokens, artifact_.raw_head - h.token_offset) : 0;
  if (q.raw_head_rows != expected_head || q.raw_tail_rows > h.tokens - q.raw_head_rows ||
      static_cast<uint64_t>(q.raw_head_rows) + q.raw_tail_rows + coded != h.tokens) {
    return Status::Corruption("dckv: raw/coded row counts disagree with the header");
  }
  if (flags & kFlagTokenIds) {
    const bool wide = WideTokenIds();
    if (r.remaining() < static_cast<uint64_t>(coded) * (wide ? 4 : 2)) return Status::Corruption("dckv: truncated token ids");
    q.token_ids.resize(coded);
    for (uint32_t& id : q.token_ids) {
      if (wide) {
        r.U32(&id);
      } else {
        uint16_t v = 0;
        r.U16(&v);
        id = v;
      }
      if (id >= artifact_.conditioning.vocab) return Status::Corruption("dckv: token id outside the vocabulary");
    }
  }
  const uint64_t per_token = 2ull * artifact_.n_layers * artifact_.HeadRow();
  const uint64_t raw_values = (static_cast<uint64_t>(q.raw_head_rows) + q.raw_tail_rows) * per_token;
  if (r.remaining() < raw_values * 2) return Status::Corruption("dckv: truncated raw rows");
  q.raw_bf16.resize(raw_values);
  for (uint16_t& v : q.raw_bf16) r.U16(&v);
  r.Take(r.remaining(), &parsed.stream);
  if (coded == 0 || even_tables_.empty()) {
    if (!parsed.stream.empty()) return Status::Corruption("dckv: trailing bytes after the raw rows");
  }
  return parsed;
}

Result<DckvQuantized> DckvCodec::ParsePayload(std::span<const uint8_t> payload,
                                              const Digest256& model_fingerprint,
                                              uint32_t* token_offset) const {
  KVSTASH_ASSIGN_OR_RETURN(DckvParsedPayload parsed, SplitPayload(payload, model_fingerprint));
  DckvQuantized& q = parsed.q;
  q.symbols.resize(static_cast<size_t>(q.coded_rows()) * even_tables_.size());
  if (!q.symbols.empty()) {
    const std::vector<uint16_t> index = SymbolTables(q.coded_rows());
    Status st = entropy::RansDecodeSegmented(parsed.stream, index, *artifact_.tables, q.symbols);
    if (!st.ok()) return Status::Corruption("dckv: " + st.ToString());
  }
  if (token_offset) *token_offset = parsed.token_offset;
  return std::move(q);
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

Result<KvChunk> DckvCodec::DecodeFp8(std::span<const uint8_t> payload, const Digest256& model_fingerprint,
                                     std::span<const float> scales) const {
  if (!scales.empty() && scales.size() != 2ull * artifact_.n_layers) {
    return Status::InvalidArgument("dckv: want 0 or 2 * n_layers fp8 scales");
  }
  KVSTASH_ASSIGN_OR_RETURN(auto chunk, Decode(payload, model_fingerprint));
  if (chunk.layout.dtype != DType::kBF16) {
    return Status::InvalidArgument("dckv: DecodeFp8 takes bf16 payloads (this one is f16)");
  }
  return Bf16ChunkToFp8(chunk.view(), scales);
}

}  // namespace kvstash::dckv
