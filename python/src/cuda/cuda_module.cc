// kvstash._native._cuda (public face: python/kvstash/cuda.py): the optional CUDA part of the Python package,
// built only with `pip install ./python -C cmake.define.KVSTASH_PYTHON_CUDA=ON` (nvcc required; see
// python/CMakeLists.txt). Exposes:
//   - DeviceDecoder(codec, stream): restores a PrefixCodec's payloads into torch CUDA
//     tensors (any DLPack CUDA array). dckv (bf16) and spec decode
//     on the GPU (gpu::DeviceDckvDecoder / gpu::DeviceSpecDecoder, device_out variants;
//     spec's predictor runs on the CPU as for restore_chunks); raw and f16 dckv
//     payloads are decoded and verified on the CPU by the codec (RestoreKvChunks) and
//     copied host-to-device. A chunk that fails its checks raises: dckv never wrote its
//     tensor, spec's holds unspecified bytes; either way the caller must not use the
//     failing chunk's tensor (the vLLM connector never scatters it).
//   - scatter_chunk / gather_chunk: gpu_kernels/kv_blocks.h between a canonical CUDA
//     chunk and an engine's per-layer paged CUDA caches, whose strides are read from
//     the tensors (common/paged_kv.h says which layouts that covers).
//
// Tensors: chunks are C-contiguous [n_layers, 2, T, n_kv_heads, head_dim] of a 16-bit
// dtype (bf16/f16/int16/uint16: bit patterns are moved, never converted); layer caches
// are 4-D [num_blocks, n_kv_heads, block_size, 2 * head_dim] (vLLM 0.32's CUDA
// backends: K in content dims [0, head_dim), V after) with a unit last stride, or 5-D
// [2, num_blocks, block_size, H, D] / [num_blocks, 2, block_size, H, D] given with
// `layout` "kv_first" / "block_first"; every tensor on one CUDA device.
// Streams: `stream` is a cudaStream_t as an int (torch.cuda.current_stream().cuda_stream;
// 0: the legacy default stream). scatter/gather enqueue and return (order later work on
// the same stream); DeviceDecoder.restore_chunks_into synchronises the stream.
// Errors: InvalidArgumentError for a wrong shape, dtype, device or stride; codec errors
// as restore_chunks (MismatchError, CorruptionError); UnavailableError without a device;
// InternalError/ResourceExhaustedError for CUDA failures.
// Thread-safety: functions release the GIL; a DeviceDecoder is immutable after
// construction and may be used from several threads.
#include <cuda_runtime_api.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/paged_kv.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/dckv_decode.h"
#include "gpu_kernels/kv_blocks.h"
#include "gpu_kernels/spec_payload_decode.h"
#include "native.h"
#include "py_codec.h"

namespace kvstash::py {
namespace {

using CudaArray = nb::ndarray<nb::device::cuda>;

cudaStream_t StreamOf(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

std::string Shape(const CudaArray& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

void Check16(const CudaArray& a, const std::string& what) {
  if (a.dtype().bits != 16 || a.dtype().lanes != 1) {
    ThrowInvalid(what + ": expected a 16-bit element type (bf16/f16 bit patterns), got " +
                 std::to_string(a.dtype().bits) + "-bit elements");
  }
}

// A restore target holds `want` values: its element type is that dtype, or a 16-bit
// integer (bit patterns). A float16 tensor for bf16 KV (or the reverse) would read back
// as other numbers, so it is refused.
void CheckKvDtype(const CudaArray& a, DType want, const std::string& what) {
  const auto code = static_cast<nb::dlpack::dtype_code>(a.dtype().code);
  const bool bits = code == nb::dlpack::dtype_code::Int || code == nb::dlpack::dtype_code::UInt;
  const bool same = (want == DType::kBF16 && code == nb::dlpack::dtype_code::Bfloat) ||
                    (want == DType::kF16 && code == nb::dlpack::dtype_code::Float);
  if (!bits && !same) {
    ThrowInvalid(what + ": its element type is not " + std::string(DTypeName(want)) +
                 " (the codec's KV dtype) or a 16-bit integer");
  }
}

// Makes the tensors' device current for the scope (restores the previous one).
class DeviceScope {
 public:
  explicit DeviceScope(int32_t device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = gpu::CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

bool IsContiguous(const CudaArray& a) {
  int64_t want = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != want) return false;
    want *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

// A canonical chunk tensor: C-contiguous [L, 2, T, H, D], 16-bit.
void CheckChunk(const CudaArray& c, uint32_t L, uint32_t H, uint32_t D, const std::string& what) {
  Check16(c, what);
  if (c.ndim() != 5 || c.shape(0) != L || c.shape(1) != 2 || c.shape(3) != H || c.shape(4) != D) {
    ThrowInvalid(what + ": expected [" + std::to_string(L) + ", 2, T, " + std::to_string(H) + ", " +
                 std::to_string(D) + "], got " + Shape(c));
  }
  if (!IsContiguous(c)) ThrowInvalid(what + ": not C-contiguous (use .contiguous())");
}

// The transfer description of `layers` (all of one shape, strides and device) for a
// chunk of `chunk_tokens` tokens of shape H x D.
struct Layers {
  PagedKvTransfer x;
  std::vector<uint16_t*> ptrs;
  int32_t device = 0;
};

Layers DescribeLayers(const std::vector<CudaArray>& layers, const std::string& layout, uint32_t block_size) {
  if (layers.empty()) ThrowInvalid("layers: no KV cache tensors");
  Layers out;
  const CudaArray& f = layers[0];
  Check16(f, "layers[0]");
  PagedKvTransfer& x = out.x;
  x.n_layers = static_cast<uint32_t>(layers.size());
  auto st = [&](size_t i) -> uint64_t {
    if (f.stride(i) < 0) ThrowInvalid("layers[0]: negative strides are not supported");
    return static_cast<uint64_t>(f.stride(i));
  };
  if (layout == "blocks_heads_slots") {  // [N, H, B, 2 D]
    if (f.ndim() != 4 || f.shape(3) % 2 != 0) {
      ThrowInvalid("layers[0]: expected [num_blocks, n_kv_heads, block_size, 2 * head_dim], got " + Shape(f));
    }
    x.num_blocks = f.shape(0), x.n_kv_heads = static_cast<uint32_t>(f.shape(1));
    x.block_size = static_cast<uint32_t>(f.shape(2)), x.head_dim = static_cast<uint32_t>(f.shape(3) / 2);
    if (f.stride(3) != 1) ThrowInvalid("layers[0]: the content dimension must have stride 1");
    x.strides = {.kv = x.head_dim, .block = st(0), .slot = st(2), .head = st(1)};
  } else if (layout == "kv_first" || layout == "block_first") {  // [2, N, B, H, D] / [N, 2, B, H, D]
    const size_t kv = layout == "kv_first" ? 0 : 1, nb_ = 1 - kv;
    if (f.ndim() != 5 || f.shape(kv) != 2) ThrowInvalid("layers[0]: expected a 5-D " + layout + " cache, got " + Shape(f));
    x.num_blocks = f.shape(nb_), x.block_size = static_cast<uint32_t>(f.shape(2));
    x.n_kv_heads = static_cast<uint32_t>(f.shape(3)), x.head_dim = static_cast<uint32_t>(f.shape(4));
    if (f.stride(4) != 1) ThrowInvalid("layers[0]: the head_dim dimension must have stride 1");
    x.strides = {.kv = st(kv), .block = st(nb_), .slot = st(2), .head = st(3)};
  } else {
    ThrowInvalid("layout: expected blocks_heads_slots, kv_first or block_first, got " + layout);
  }
  for (size_t i = 0; i < f.ndim(); ++i) {  // expanded (stride 0) dims would alias elements
    if (f.shape(i) > 1 && f.stride(i) == 0) ThrowInvalid("layers[0]: a dimension of stride 0 (an expanded view)");
  }
  if (x.block_size != block_size) {
    ThrowInvalid("layers[0]: block size " + std::to_string(x.block_size) + ", the engine's " +
                 std::to_string(block_size));
  }
  out.device = f.device_id();
  for (size_t l = 0; l < layers.size(); ++l) {
    const CudaArray& a = layers[l];
    const std::string what = "layers[" + std::to_string(l) + "]";
    if (a.ndim() != f.ndim() || a.dtype() != f.dtype() || a.device_id() != f.device_id()) {
      ThrowInvalid(what + ": another rank, dtype or device than layers[0]");
    }
    for (size_t i = 0; i < f.ndim(); ++i) {
      if (a.shape(i) != f.shape(i) || a.stride(i) != f.stride(i)) {
        ThrowInvalid(what + ": another shape or stride than layers[0]");
      }
    }
    out.ptrs.push_back(static_cast<uint16_t*>(a.data()));
  }
  return out;
}

std::vector<int32_t> BlockIds(const std::vector<int64_t>& ids) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (int64_t b : ids) {
    if (b < 0 || b > INT32_MAX) ThrowInvalid("block_ids: " + std::to_string(b) + " is not a block id");
    out.push_back(static_cast<int32_t>(b));
  }
  return out;
}

// scatter (to_cache) or gather of chunk tokens [t_begin, t_end).
void Transfer(bool to_cache, const CudaArray& chunk, const std::vector<CudaArray>& layers,
              const std::vector<int64_t>& block_ids, uint64_t first_token, uint32_t t_begin,
              std::optional<uint32_t> t_end, uint32_t block_size, const std::string& layout, uintptr_t stream) {
  Layers d = DescribeLayers(layers, layout, block_size);
  CheckChunk(chunk, d.x.n_layers, d.x.n_kv_heads, d.x.head_dim, "chunk");
  if (chunk.device_id() != d.device) ThrowInvalid("chunk: on another device than the caches");
  if (chunk.dtype() != layers[0].dtype()) ThrowInvalid("chunk: another dtype than the caches");
  const std::vector<int32_t> ids = BlockIds(block_ids);
  d.x.chunk_tokens = static_cast<uint32_t>(chunk.shape(2));
  d.x.t_begin = t_begin;
  d.x.t_end = t_end.value_or(d.x.chunk_tokens);
  d.x.first_token = first_token;
  d.x.n_block_ids = static_cast<uint32_t>(ids.size());
  Status s;
  {
    nb::gil_scoped_release release;
    DeviceScope scope(d.device);
    s = scope.status();
    if (s.ok()) {
      if (to_cache) {
        s = gpu::ScatterChunkCuda(d.x, ids, static_cast<const uint16_t*>(chunk.data()), d.ptrs, StreamOf(stream));
      } else {
        std::vector<const uint16_t*> c(d.ptrs.begin(), d.ptrs.end());
        s = gpu::GatherChunkCuda(d.x, ids, c, static_cast<uint16_t*>(chunk.data()), StreamOf(stream));
      }
    }
  }
  ThrowIfError(s);
}

// Restores payloads of a PrefixCodec into CUDA tensors (see the file comment).
class DeviceDecoder {
 public:
  DeviceDecoder(nb::object codec_obj, uintptr_t stream) : codec_obj_(std::move(codec_obj)) {
    codec_ = nb::cast<PyCodec*>(codec_obj_);
    if (codec_ == nullptr || codec_->codec == nullptr) ThrowInvalid("DeviceDecoder: not a PrefixCodec");
    std::string why;
    if (!gpu::CudaDeviceAvailable(&why)) ThrowStatus(Status::Unavailable("DeviceDecoder: no CUDA device (" + why + ")"));
    if (const dckv::DckvCodec* dk = codec_->codec->dckv_codec();
        dk != nullptr && codec_->codec->layout().dtype == DType::kBF16) {
      Result<gpu::DeviceDckvDecoder> r = Status::Internal("unset");
      {
        nb::gil_scoped_release release;
        r = gpu::DeviceDckvDecoder::Create(dk->artifact(), StreamOf(stream));
      }
      dckv_ = std::make_unique<gpu::DeviceDckvDecoder>(ValueOrThrow(std::move(r)));
    } else if (const spec::SpecArtifact* sa = codec_->codec->spec_artifact(); sa != nullptr) {
      Result<gpu::DeviceSpecDecoder> r = Status::Internal("unset");
      {
        nb::gil_scoped_release release;
        r = gpu::DeviceSpecDecoder::Create(*sa, StreamOf(stream));
      }
      spec_ = std::make_unique<gpu::DeviceSpecDecoder>(ValueOrThrow(std::move(r)));
    }
    (void)cudaGetDevice(&device_);
  }

  // "gpu" when payloads decode on the device, "cpu" when they decode on the host
  // (verified there) and are then copied to the device.
  std::string where() const { return dckv_ || spec_ ? "gpu" : "cpu"; }

  void RestoreInto(nb::handle tokens, const std::vector<ChunkKey>& keys, nb::handle payload_seq,
                   const std::vector<CudaArray>& outs, uintptr_t stream) const {
    const std::vector<uint32_t> t = ToTokens(tokens);
    std::vector<std::vector<uint8_t>> payloads;
    if (!PySequence_Check(payload_seq.ptr())) ThrowInvalid("payloads: expected a list of bytes");
    for (nb::handle p : nb::borrow<nb::sequence>(payload_seq)) payloads.push_back(BufferBytes(p, "payload"));
    const KvLayout& L = codec_->codec->layout();
    if (outs.size() != payloads.size()) {
      ThrowInvalid("outs: " + std::to_string(outs.size()) + " tensors for " + std::to_string(payloads.size()) +
                   " payloads");
    }
    if (L.dtype != DType::kBF16 && L.dtype != DType::kF16) ThrowInvalid("DeviceDecoder: the codec's dtype is not bf16/f16");
    int32_t device = -1;
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string what = "outs[" + std::to_string(i) + "]";
      CheckChunk(outs[i], L.n_layers, L.n_kv_heads, L.head_dim, what);
      CheckKvDtype(outs[i], L.dtype, what);
      if (i < keys.size() && outs[i].shape(2) != keys[i].tokens) {
        ThrowInvalid(what + ": " + std::to_string(outs[i].shape(2)) + " tokens, its chain chunk " +
                     std::to_string(keys[i].tokens));
      }
      if (device >= 0 && outs[i].device_id() != device) ThrowInvalid(what + ": on another device");
      device = outs[i].device_id();
    }
    if ((dckv_ || spec_) && device != device_) ThrowInvalid("outs: on another device than the decoder's");
    std::vector<uint8_t*> dst;
    for (const CudaArray& o : outs) dst.push_back(static_cast<uint8_t*>(o.data()));
    Status s;
    {
      nb::gil_scoped_release release;
      DeviceScope scope(device);
      s = scope.status();
      if (s.ok()) {
        s = dckv_ || spec_ ? RestoreOnDevice(t, keys, payloads, dst, stream)
                           : RestoreOnHost(t, keys, payloads, dst, stream);
      }
    }
    ThrowIfError(s);
  }

 private:
  Status RestoreOnDevice(const std::vector<uint32_t>& t, const std::vector<ChunkKey>& keys,
                         const std::vector<std::vector<uint8_t>>& payloads, const std::vector<uint8_t*>& dst,
                         uintptr_t stream) const {
    const PrefixCodec& c = *codec_->codec;
    KVSTASH_RETURN_IF_ERROR(c.CheckRestoreInputs(t, keys, payloads));
    model::PredictorCache prediction;  // spec: the predictor's K/V of the covered tokens
    if (spec_) KVSTASH_RETURN_IF_ERROR(c.PredictForRestore(t, static_cast<uint32_t>(payloads.size()), &prediction));
    const uint32_t C = c.options().chunk_tokens;
    for (size_t i = 0; i < payloads.size(); ++i) {
      const uint64_t bytes = c.layout().DataBytes(keys[i].tokens);
      const uint32_t first = static_cast<uint32_t>(i) * C;
      Result<KvChunk> r =
          dckv_ ? dckv_->Decode(payloads[i], c.options().model_fingerprint, StreamOf(stream), dst[i], bytes)
                : spec_->Decode(payloads[i], spec::PredictedSlice(prediction, c.layout(), first, first + keys[i].tokens),
                                c.options().model_fingerprint, StreamOf(stream), dst[i], bytes);
      KVSTASH_ASSIGN_OR_RETURN(KvChunk k, std::move(r));
      if (!(k.layout == c.layout()) || k.tokens != keys[i].tokens) {
        return Status::Mismatch("decoded chunk has another shape than the chain's chunk");
      }
    }
    return Status::Ok();
  }

  Status RestoreOnHost(const std::vector<uint32_t>& t, const std::vector<ChunkKey>& keys,
                       const std::vector<std::vector<uint8_t>>& payloads, const std::vector<uint8_t*>& dst,
                       uintptr_t stream) const {
    KVSTASH_ASSIGN_OR_RETURN(std::vector<KvChunk> chunks, codec_->codec->RestoreKvChunks(t, keys, payloads));
    for (size_t i = 0; i < chunks.size(); ++i) {  // verified by RestoreKvChunks
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst[i], chunks[i].data.data(), chunks[i].data.size(),
                                                   cudaMemcpyHostToDevice, StreamOf(stream)));
    }
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(StreamOf(stream)));
    return Status::Ok();
  }

  nb::object codec_obj_;  // keeps the PrefixCodec alive
  PyCodec* codec_ = nullptr;
  std::unique_ptr<gpu::DeviceDckvDecoder> dckv_;
  std::unique_ptr<gpu::DeviceSpecDecoder> spec_;
  int device_ = -1;
};

}  // namespace

void BindCuda(nb::module_& m) {
  m.def(
      "device_available",
      []() {
        std::string why;
        const bool ok = gpu::CudaDeviceAvailable(&why);
        return std::make_tuple(ok, why);
      },
      "(True, '') when a CUDA device is usable, else (False, the runtime's reason).");
  m.def(
      "scatter_chunk",
      [](const CudaArray& chunk, const std::vector<CudaArray>& layers, const std::vector<int64_t>& block_ids,
         uint64_t first_token, uint32_t block_size, uint32_t t_begin, std::optional<uint32_t> t_end,
         const std::string& layout, uintptr_t stream) {
        Transfer(true, chunk, layers, block_ids, first_token, t_begin, t_end, block_size, layout, stream);
      },
      nb::arg("chunk"), nb::arg("layers"), nb::arg("block_ids"), nb::arg("first_token"), nb::arg("block_size"),
      nb::arg("t_begin") = 0, nb::arg("t_end").none() = nb::none(), nb::arg("layout") = "blocks_heads_slots",
      nb::arg("stream") = 0,
      "Writes chunk tokens [t_begin, t_end) (default: all) of the canonical CUDA chunk [n_layers, 2, T, "
      "n_kv_heads, head_dim] into the per-layer paged caches: chunk token t is request token first_token + "
      "t, in block block_ids[(first_token + t) // block_size], slot (first_token + t) % block_size. "
      "Enqueued on `stream` (not synchronised). Raises InvalidArgumentError for a wrong shape, stride, "
      "dtype, device, block id or range.");
  m.def(
      "gather_chunk",
      [](const std::vector<CudaArray>& layers, const std::vector<int64_t>& block_ids, uint64_t first_token,
         uint32_t block_size, const CudaArray& chunk, uint32_t t_begin, std::optional<uint32_t> t_end,
         const std::string& layout, uintptr_t stream) {
        Transfer(false, chunk, layers, block_ids, first_token, t_begin, t_end, block_size, layout, stream);
      },
      nb::arg("layers"), nb::arg("block_ids"), nb::arg("first_token"), nb::arg("block_size"), nb::arg("chunk"),
      nb::arg("t_begin") = 0, nb::arg("t_end").none() = nb::none(), nb::arg("layout") = "blocks_heads_slots",
      nb::arg("stream") = 0,
      "The inverse of scatter_chunk: reads chunk tokens [t_begin, t_end) from the caches into `chunk`.");
  nb::class_<DeviceDecoder>(m, "DeviceDecoder",
                            "Restores a PrefixCodec's payloads into CUDA tensors (dckv and spec on the GPU; raw "
                            "verified on the CPU, then copied). Thread-safe; releases the GIL.")
      .def(nb::init<nb::object, uintptr_t>(), nb::arg("codec"), nb::arg("stream") = 0,
           "Uploads what the codec's GPU decoder needs (dckv or spec artifact) on the current device. Raises "
           "UnavailableError without a device.")
      .def_prop_ro("where", &DeviceDecoder::where, "'gpu' or 'cpu': where payloads are decoded.")
      .def("restore_chunks_into", &DeviceDecoder::RestoreInto, nb::arg("tokens"), nb::arg("keys"),
           nb::arg("payloads"), nb::arg("outs"), nb::arg("stream") = 0,
           "Decodes and verifies the payloads of chain chunks [0, len(payloads)) as restore_chunks does and "
           "writes chunk i into outs[i] (C-contiguous CUDA [n_layers, 2, keys[i].tokens, n_kv_heads, "
           "head_dim], the codec's dtype or int16/uint16). Synchronises `stream`. On an error the tensors of "
           "the failing chunk and "
           "later ones must not be used (earlier ones hold verified chunks).");
}

}  // namespace kvstash::py
