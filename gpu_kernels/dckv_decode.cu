// Host side of the CUDA dckv decoder (dckv_decode.h) and its kernel launches.
#include "gpu_kernels/dckv_decode.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "codec/dckv/dckv_rope.h"
#include "codec/entropy/rans_segments.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/dckv_decode.cuh"
#include "gpu_kernels/device_arena.h"
#include "gpu_kernels/rans_decode.h"

namespace kvstash::gpu {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(uint64_t n) {
  return static_cast<unsigned>(std::clamp<uint64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

// Host bytes of a vector appended to a staging buffer at a reserved offset.
template <typename T>
void Stage(std::vector<uint8_t>* staging, uint64_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(staging->data() + offset, v.data(), v.size() * sizeof(T));
}

// The device parts of one group (offsets into the model arena until resolved).
struct GroupOffsets {
  uint64_t mean = 0, basis = 0, step = 0, token_map = 0, context_map = 0;
  uint64_t net_w1 = 0, net_b1 = 0, net_w2 = 0, net_b2 = 0;  // decoder correction net (empty: none)
};

}  // namespace

struct DeviceDckvDecoder::Model {
  std::unique_ptr<dckv::DckvCodec> codec;
  DeviceRansTables tables;
  DeviceArena arena;
  std::vector<GroupOffsets> groups;
  std::vector<uint64_t> symbol_offset;  // each group's first component in a coded row
  uint64_t active = 0;                  // symbols per coded row
  uint64_t even_tables = 0, odd_tables = 0, embed = 0;
};

DeviceDckvDecoder::DeviceDckvDecoder(std::unique_ptr<Model> model) : model_(std::move(model)) {}
DeviceDckvDecoder::DeviceDckvDecoder(DeviceDckvDecoder&& other) noexcept = default;
DeviceDckvDecoder& DeviceDckvDecoder::operator=(DeviceDckvDecoder&& other) noexcept = default;
DeviceDckvDecoder::~DeviceDckvDecoder() = default;

const dckv::DckvCodec& DeviceDckvDecoder::codec() const { return *model_->codec; }

Result<DeviceDckvDecoder> DeviceDckvDecoder::Create(dckv::DckvArtifact artifact, cudaStream_t stream) {
  KVSTASH_ASSIGN_OR_RETURN(dckv::DckvCodec codec, dckv::DckvCodec::Create(std::move(artifact)));
  const dckv::DckvArtifact& a = codec.artifact();
  KVSTASH_ASSIGN_OR_RETURN(DeviceRansTables tables, DeviceRansTables::Upload(*a.tables, stream));
  auto m = std::make_unique<Model>(Model{nullptr, std::move(tables), DeviceArena(), {}, {}, 0, 0, 0, 0});
  uint64_t total = 0;
  std::vector<uint16_t> even, odd;
  for (const dckv::DckvGroup& g : a.groups) {
    GroupOffsets o;
    o.mean = DeviceArena::Reserve(&total, g.mean.size() * 4);
    o.basis = DeviceArena::Reserve(&total, g.basis.size() * 4);
    o.step = DeviceArena::Reserve(&total, g.step.size() * 4);
    o.token_map = DeviceArena::Reserve(&total, g.token_map.size() * 4);
    o.context_map = DeviceArena::Reserve(&total, g.context_map.size() * 4);
    o.net_w1 = DeviceArena::Reserve(&total, g.decoder_net.w1.size() * 4);
    o.net_b1 = DeviceArena::Reserve(&total, g.decoder_net.b1.size() * 4);
    o.net_w2 = DeviceArena::Reserve(&total, g.decoder_net.w2.size() * 4);
    o.net_b2 = DeviceArena::Reserve(&total, g.decoder_net.b2.size() * 4);
    m->groups.push_back(o);
    m->symbol_offset.push_back(m->active);
    m->active += g.n_active();
    even.insert(even.end(), g.table_index.begin(), g.table_index.end());
    odd.insert(odd.end(), g.odd_table_index.begin(), g.odd_table_index.end());
  }
  m->even_tables = DeviceArena::Reserve(&total, even.size() * 2);
  m->odd_tables = DeviceArena::Reserve(&total, odd.size() * 2);
  m->embed = DeviceArena::Reserve(&total, a.conditioning.embed_bf16.size() * 2);
  std::vector<uint8_t> staging(total);
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    const dckv::DckvGroup& g = a.groups[gi];
    const GroupOffsets& o = m->groups[gi];
    Stage(&staging, o.mean, g.mean);
    Stage(&staging, o.basis, g.basis);
    Stage(&staging, o.step, g.step);
    Stage(&staging, o.token_map, g.token_map);
    Stage(&staging, o.context_map, g.context_map);
    Stage(&staging, o.net_w1, g.decoder_net.w1);
    Stage(&staging, o.net_b1, g.decoder_net.b1);
    Stage(&staging, o.net_w2, g.decoder_net.w2);
    Stage(&staging, o.net_b2, g.decoder_net.b2);
  }
  Stage(&staging, m->even_tables, even);
  Stage(&staging, m->odd_tables, odd);
  Stage(&staging, m->embed, a.conditioning.embed_bf16);
  KVSTASH_RETURN_IF_ERROR(m->arena.Allocate(total, "dckv: cudaMalloc"));
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(m->arena.at<uint8_t>(0), staging.data(), total, cudaMemcpyHostToDevice, stream));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  m->codec = std::make_unique<dckv::DckvCodec>(std::move(codec));
  return DeviceDckvDecoder(std::move(m));
}

Result<KvChunk> DeviceDckvDecoder::Decode(std::span<const uint8_t> payload,
                                          const Digest256& model_fingerprint,
                                          cudaStream_t stream, uint8_t* device_out,
                                          uint64_t device_out_bytes) const {
  const Model& m = *model_;
  const dckv::DckvArtifact& a = m.codec->artifact();
  KVSTASH_ASSIGN_OR_RETURN(dckv::DckvParsedPayload parsed, m.codec->SplitPayload(payload, model_fingerprint));
  const dckv::DckvQuantized& q = parsed.q;
  if (q.out_dtype != DType::kBF16) {
    return Status::NotSupported("dckv GPU decoder: f16 payloads decode on the CPU only");
  }
  if (device_out != nullptr && device_out_bytes != m.codec->OutputLayout().DataBytes(q.tokens)) {
    return Status::InvalidArgument("dckv GPU decoder: device_out has " + std::to_string(device_out_bytes) +
                                   " bytes, the chunk " +
                                   std::to_string(m.codec->OutputLayout().DataBytes(q.tokens)));
  }
  const uint32_t hr = a.HeadRow();
  const uint64_t per_token = 2ull * a.n_layers * hr;
  const uint32_t R = q.coded_rows();
  const uint64_t A = m.active;
  const uint64_t num_symbols = static_cast<uint64_t>(R) * A;
  KvChunk out = KvChunk::Zeros(m.codec->OutputLayout(), q.tokens);
  if (R > 0) {
    entropy::SegmentDirectory dir;
    if (num_symbols > 0) {
      auto d = entropy::ParseSegmentDirectory(parsed.stream);
      if (!d.ok()) return Status::Corruption("dckv: " + d.status().ToString());
      dir = std::move(d).value();
      if (dir.num_symbols != num_symbols) {
        return Status::Corruption("dckv: the stream's symbol count differs from the body's");
      }
    }
    // Workspace: stream, directory, per-segment status, table indices, symbols,
    // coefficients, token ids, RoPE table, output chunk, the decoder nets' hidden values
    // (the largest group's; the groups' net and synthesis kernels run in stream order).
    const uint32_t half = a.head_dim / 2;
    const dckv::RopeTable rope(a.head_dim, a.rope_theta, parsed.token_offset + q.raw_head_rows, R);
    uint64_t total = 0;
    const uint64_t w_stream = DeviceArena::Reserve(&total, parsed.stream.size());
    const uint64_t w_offsets = DeviceArena::Reserve(&total, dir.offsets.size() * 8);
    const uint64_t w_status = DeviceArena::Reserve(&total, num_symbols > 0 ? dir.num_segments() : 0);
    const uint64_t w_index = DeviceArena::Reserve(&total, num_symbols * 2);
    const uint64_t w_symbols = DeviceArena::Reserve(&total, num_symbols * 2);
    const uint64_t w_coef = DeviceArena::Reserve(&total, num_symbols * 4);
    const uint64_t w_ids = DeviceArena::Reserve(&total, q.token_ids.size() * 4);
    const uint64_t w_cos = DeviceArena::Reserve(&total, static_cast<uint64_t>(R) * half * 4);
    const uint64_t w_sin = DeviceArena::Reserve(&total, static_cast<uint64_t>(R) * half * 4);
    const uint64_t w_out = DeviceArena::Reserve(&total, out.data.size());
    uint32_t max_hidden = 0;
    for (const dckv::DckvGroup& g : a.groups) max_hidden = std::max(max_hidden, g.decoder_net.hidden);
    const uint64_t w_hidden = DeviceArena::Reserve(&total, static_cast<uint64_t>(R) * max_hidden * 4);
    DeviceArena w;
    KVSTASH_RETURN_IF_ERROR(w.Allocate(total, "dckv: cudaMalloc"));
    auto upload = [&](uint64_t at, const void* src, uint64_t bytes) {
      return bytes == 0 ? Status::Ok()
                        : CudaStatus(cudaMemcpyAsync(w.at<uint8_t>(at), src, bytes, cudaMemcpyHostToDevice, stream),
                                     "dckv: upload");
    };
    KVSTASH_RETURN_IF_ERROR(upload(w_stream, parsed.stream.data(), parsed.stream.size()));
    KVSTASH_RETURN_IF_ERROR(upload(w_offsets, dir.offsets.data(), dir.offsets.size() * 8));
    KVSTASH_RETURN_IF_ERROR(upload(w_ids, q.token_ids.data(), q.token_ids.size() * 4));
    KVSTASH_RETURN_IF_ERROR(upload(w_cos, rope.cos_values().data(), rope.cos_values().size() * 4));
    KVSTASH_RETURN_IF_ERROR(upload(w_sin, rope.sin_values().data(), rope.sin_values().size() * 4));
    // rANS symbols.
    if (num_symbols > 0) {
      kernels::DckvTableIndexKernel<<<Blocks(num_symbols), kThreads, 0, stream>>>(
          m.arena.at<const uint16_t>(m.even_tables), m.arena.at<const uint16_t>(m.odd_tables), A, num_symbols,
          w.at<uint16_t>(w_index));
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetLastError());
      RansSegmentsLaunch l;
      l.framed = w.at<const uint8_t>(w_stream);
      l.offsets = w.at<const uint64_t>(w_offsets);
      l.num_segments = dir.num_segments();
      l.segment_symbols = dir.segment_symbols;
      l.num_symbols = num_symbols;
      l.table_index = w.at<const uint16_t>(w_index);
      l.status = w.at<uint8_t>(w_status);
      KVSTASH_RETURN_IF_ERROR(RansDecodeSegmentsCuda(m.tables.view(), l, w.at<uint16_t>(w_symbols), stream));
    }
    // Passes 1 (even rows) and 2 (odd rows) of every group, then the synthesis.
    for (uint32_t parity = 0; parity < 2; ++parity) {
      for (size_t gi = 0; gi < a.groups.size(); ++gi) {
        const dckv::DckvGroup& g = a.groups[gi];
        const bool context = parity == 1 && !g.context_map.empty();
        dckv::DckvPassParams p;
        p.map = m.arena.at<const float>(context ? m.groups[gi].context_map : m.groups[gi].token_map);
        p.k = context ? g.context_inputs : 0;
        p.rank = a.conditioning.rank;
        p.n_active = g.n_active();
        p.parity = parity;
        p.rows = R;
        p.stride = A;
        p.offset = m.symbol_offset[gi];
        p.step = m.arena.at<const float>(m.groups[gi].step);
        p.embed = m.arena.at<const uint16_t>(m.embed);
        p.token_ids = q.token_ids.empty() ? nullptr : w.at<const uint32_t>(w_ids);
        p.symbols = w.at<const uint16_t>(w_symbols);
        p.coef = w.at<float>(w_coef);
        const uint64_t n = dckv::DckvPassCount(p);
        if (n == 0) continue;
        kernels::DckvPassKernel<<<Blocks(n), kThreads, 0, stream>>>(p);
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetLastError());
      }
    }
    for (size_t gi = 0; gi < a.groups.size(); ++gi) {
      const dckv::DckvGroup& g = a.groups[gi];
      const GroupOffsets& o = m.groups[gi];
      const uint32_t hidden = g.decoder_net.hidden;
      if (hidden > 0) {
        dckv::DckvNetHiddenParams h;
        h.w1 = m.arena.at<const float>(o.net_w1);
        h.b1 = m.arena.at<const float>(o.net_b1);
        h.hidden = hidden;
        h.n_active = g.n_active();
        h.rows = R;
        h.stride = A;
        h.offset = m.symbol_offset[gi];
        h.coef = w.at<const float>(w_coef);
        h.out = w.at<float>(w_hidden);
        const uint64_t n = dckv::DckvNetHiddenCount(h);
        kernels::DckvNetHiddenKernel<<<Blocks(n), kThreads, 0, stream>>>(h);
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetLastError());
      }
      dckv::DckvSynthesisParams p;
      p.mean = m.arena.at<const float>(o.mean);
      p.basis = m.arena.at<const float>(o.basis);
      p.n_active = g.n_active();
      p.dims = g.dims;
      p.first_layer = g.first_layer;
      p.n_kv_heads = a.n_kv_heads;
      p.head_dim = a.head_dim;
      p.rows = R;
      p.first_row = q.raw_head_rows;
      p.tokens = q.tokens;
      p.stride = A;
      p.offset = m.symbol_offset[gi];
      p.coef = w.at<const float>(w_coef);
      p.rope_cos = w.at<const float>(w_cos);
      p.rope_sin = w.at<const float>(w_sin);
      p.hidden = hidden;
      if (hidden > 0) {
        p.net_w2 = m.arena.at<const float>(o.net_w2);
        p.net_b2 = m.arena.at<const float>(o.net_b2);
        p.net_hidden = w.at<const float>(w_hidden);
      }
      p.out = w.at<uint16_t>(w_out);
      const uint64_t n = dckv::DckvSynthesisCount(p);
      if (n == 0) continue;
      kernels::DckvSynthesisKernel<<<Blocks(n), kThreads, 0, stream>>>(p);
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
    std::vector<uint8_t> status(num_symbols > 0 ? dir.num_segments() : 0);
    KVSTASH_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(out.data.data(), w.at<uint8_t>(w_out), out.data.size(), cudaMemcpyDeviceToHost, stream));
    if (!status.empty()) {
      KVSTASH_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(status.data(), w.at<uint8_t>(w_status), status.size(), cudaMemcpyDeviceToHost, stream));
    }
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const Status rans = RansSegmentStatusToStatus(status);
    if (!rans.ok()) return Status::Corruption("dckv: " + rans.ToString());
  }
  // Raw head and tail rows (bf16 as stored, K after RoPE), layout as in the body.
  auto put_raw = [&](uint32_t t, const uint16_t* src) {
    for (uint32_t l = 0; l < a.n_layers; ++l) {
      for (uint32_t kv = 0; kv < 2; ++kv, src += hr) {
        uint8_t* dst = out.data.data() + 2 * ((2ull * l + kv) * q.tokens + t) * hr;
        for (uint32_t c = 0; c < hr; ++c) {
          dst[2 * c] = static_cast<uint8_t>(src[c]);
          dst[2 * c + 1] = static_cast<uint8_t>(src[c] >> 8);
        }
      }
    }
  };
  for (uint32_t t = 0; t < q.raw_head_rows; ++t) put_raw(t, q.raw_bf16.data() + t * per_token);
  for (uint32_t j = 0; j < q.raw_tail_rows; ++j) {
    put_raw(q.tokens - q.raw_tail_rows + j, q.raw_bf16.data() + (q.raw_head_rows + j) * per_token);
  }
  if (out.ContentChecksum() != parsed.content_checksum) {
    return Status::Corruption("dckv: decoded content checksum mismatch (GPU decoder)");
  }
  if (device_out != nullptr) {  // the verified bytes, never the unverified workspace
    KVSTASH_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device_out, out.data.data(), out.data.size(), cudaMemcpyHostToDevice, stream));
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  return out;
}

}  // namespace kvstash::gpu
