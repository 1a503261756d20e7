#include "gpu_kernels/spec_payload_decode.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codec/entropy/rans_segments.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/device_arena.h"
#include "gpu_kernels/spec_decode.h"

namespace kvstash::gpu {

struct DeviceSpecDecoder::Impl {
  spec::SpecArtifact artifact;
  Digest256 artifact_digest;  // artifact.Digest(), once (it hashes the whole artifact)
  DeviceRansTables tables;
};

DeviceSpecDecoder::DeviceSpecDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceSpecDecoder::DeviceSpecDecoder(DeviceSpecDecoder&& other) noexcept = default;
DeviceSpecDecoder& DeviceSpecDecoder::operator=(DeviceSpecDecoder&& other) noexcept = default;
DeviceSpecDecoder::~DeviceSpecDecoder() = default;

Result<DeviceSpecDecoder> DeviceSpecDecoder::Create(spec::SpecArtifact artifact, cudaStream_t stream) {
  if (artifact.tables == nullptr) return Status::InvalidArgument("spec GPU decoder: the artifact has no tables");
  KVSTASH_ASSIGN_OR_RETURN(DeviceRansTables tables, DeviceRansTables::Upload(*artifact.tables, stream));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const Digest256 digest = artifact.Digest();
  return DeviceSpecDecoder(std::make_unique<Impl>(Impl{std::move(artifact), digest, std::move(tables)}));
}

const spec::SpecArtifact& DeviceSpecDecoder::artifact() const { return impl_->artifact; }

Result<KvChunk> DeviceSpecDecoder::Decode(std::span<const uint8_t> payload, const spec::PredictedChunk& prediction,
                                          const Digest256& model_fingerprint, cudaStream_t stream,
                                          uint8_t* device_out, uint64_t device_out_bytes) const {
  const spec::SpecArtifact& art = impl_->artifact;
  KVSTASH_ASSIGN_OR_RETURN(spec::SpecPayloadParts parts,
                           spec::SplitSpecPayload(art, impl_->artifact_digest, payload, prediction, model_fingerprint));
  const KvLayout& L = parts.header.layout;
  const uint32_t tokens = parts.header.tokens;
  const bool fp8 = L.dtype == DType::kFP8E4M3;
  const uint64_t n = L.ScalarsPerTensor(tokens);
  const uint64_t tensor_bytes = n * (fp8 ? 1 : 2);
  const uint32_t n_streams = 2 * L.n_layers;
  const uint32_t row = L.n_kv_heads * L.head_dim;
  KvChunk out = KvChunk::Zeros(L, tokens);
  out.scales = parts.scales;
  if (device_out != nullptr && device_out_bytes != out.data.size()) {
    return Status::InvalidArgument("spec GPU decoder: device_out holds " + std::to_string(device_out_bytes) +
                                   " bytes, the chunk " + std::to_string(out.data.size()));
  }
  if (device_out != nullptr && !fp8 && reinterpret_cast<uintptr_t>(device_out) % 2 != 0) {
    return Status::InvalidArgument("spec GPU decoder: device_out is not 2-byte aligned");
  }
  if (tokens == 0) {
    if (out.ContentChecksum() != parts.header.content_checksum) {
      return Status::Corruption("spec: decoded chunk fails its content checksum");
    }
    return out;
  }

  // Every stream's directory on the host (the CPU parser), then one workspace for all
  // streams: the payload, each stream's offsets and segment status, the predictions,
  // the sigma rows, the context scratch and (without device_out) the output.
  std::vector<entropy::SegmentDirectory> dirs(n_streams);
  uint64_t total_segments = 0, total_offsets = 0;
  for (uint32_t s = 0; s < n_streams; ++s) {
    auto d = entropy::ParseSegmentDirectory(parts.streams[s]);
    if (!d.ok()) return Status::Corruption("spec stream " + std::to_string(s) + ": " + d.status().message());
    dirs[s] = std::move(d).value();
    total_segments += dirs[s].num_segments();
    total_offsets += dirs[s].offsets.size();
  }
  uint64_t total = 0;
  const uint64_t w_payload = DeviceArena::Reserve(&total, payload.size());
  const uint64_t w_offsets = DeviceArena::Reserve(&total, total_offsets * 8);
  const uint64_t w_status = DeviceArena::Reserve(&total, total_segments);
  const uint64_t w_mu = DeviceArena::Reserve(&total, n_streams * n * 4);
  const uint64_t w_sigma = DeviceArena::Reserve(&total, static_cast<uint64_t>(n_streams) * row * 4);
  const uint64_t w_pred = DeviceArena::Reserve(&total, n_streams * n * 2);
  const uint64_t w_table = DeviceArena::Reserve(&total, n_streams * n * 2);
  const uint64_t w_out = DeviceArena::Reserve(&total, device_out == nullptr ? out.data.size() : 0);
  DeviceArena w;
  KVSTASH_RETURN_IF_ERROR(w.Allocate(total, "spec GPU decoder: cudaMalloc"));
  uint8_t* d_out = device_out != nullptr ? device_out : w.at<uint8_t>(w_out);
  auto upload = [&](void* dst, const void* src, uint64_t bytes) {
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "spec GPU decoder: upload");
  };
  KVSTASH_RETURN_IF_ERROR(upload(w.at<uint8_t>(w_payload), payload.data(), payload.size()));

  uint64_t offsets_at = 0, status_at = 0;
  std::vector<uint64_t> status_first(n_streams);
  for (uint32_t s = 0; s < n_streams; ++s) {
    const uint32_t l = s / 2, kv = s % 2;
    const entropy::SegmentDirectory& dir = dirs[s];
    float* mu = w.at<float>(w_mu) + s * n;
    float* sigma = w.at<float>(w_sigma) + static_cast<uint64_t>(s) * row;
    uint64_t* offsets = w.at<uint64_t>(w_offsets) + offsets_at;
    const std::span<const float> log2_sigma = art.Log2Sigma(l, kv);
    KVSTASH_RETURN_IF_ERROR(upload(mu, kv == 0 ? prediction.k[l] : prediction.v[l], n * 4));
    KVSTASH_RETURN_IF_ERROR(upload(sigma, log2_sigma.data(), log2_sigma.size() * 4));
    KVSTASH_RETURN_IF_ERROR(upload(offsets, dir.offsets.data(), dir.offsets.size() * 8));
    SpecTensorDecodeArgs a;
    a.mu = mu;
    a.n = n;
    a.log2_sigma = sigma;
    a.row = static_cast<uint32_t>(log2_sigma.size());
    a.fp8_scale = fp8 ? out.scales[s] : 1.0f;
    a.framed = w.at<const uint8_t>(w_payload) + (parts.streams[s].data() - payload.data());
    a.offsets = offsets;
    a.num_segments = dir.num_segments();
    a.segment_symbols = dir.segment_symbols;
    a.num_symbols = dir.num_symbols;
    a.pred_ordinal = w.at<uint16_t>(w_pred) + s * n;
    a.table = w.at<uint16_t>(w_table) + s * n;
    a.segment_status = w.at<uint8_t>(w_status) + status_at;
    // Canonical layout: layer l's K then V, each tensor_bytes long.
    a.out = d_out + s * tensor_bytes;
    if (Status st = DecodeSpecTensorDevice(art.contexts, impl_->tables.view(), a, stream); !st.ok()) {
      // The arguments are checked above, so what is left is the stream's shape or a
      // context input: Corruption, as the CPU decoder says.
      if (st.code() != Status::Code::kInvalidArgument) return st;
      return Status::Corruption("spec stream " + std::to_string(s) + ": " + st.message());
    }
    status_first[s] = status_at;
    offsets_at += dir.offsets.size();
    status_at += dir.num_segments();
  }
  std::vector<uint8_t> status(total_segments);
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(status.data(), w.at<uint8_t>(w_status), status.size(),
                                               cudaMemcpyDeviceToHost, stream));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data.data(), d_out, out.data.size(), cudaMemcpyDeviceToHost, stream));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  for (uint32_t s = 0; s < n_streams; ++s) {  // the lowest failing stream, as the CPU decoder
    const std::span<const uint8_t> st(status.data() + status_first[s], dirs[s].num_segments());
    KVSTASH_RETURN_IF_ERROR(RansSegmentStatusToStatus(st));
  }
  if (out.ContentChecksum() != parts.header.content_checksum) {
    return Status::Corruption("spec: decoded chunk fails its content checksum");
  }
  return out;
}

}  // namespace kvstash::gpu
