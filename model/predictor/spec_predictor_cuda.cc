// Mirror kept on purpose: SpecPredictor::Run (spec_predictor.cc) step for step on a CUDA device, bit-identical.
#include "model/predictor/spec_predictor_cuda.h"

#ifdef KVSTASH_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/spec_predictor_kernels.h"

namespace kvstash::model {
namespace {

// Owning device array.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }

  Status Allocate(size_t n) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = n;
    return gpu::CudaStatus(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)),
                           "cudaMalloc");
  }
  Status Upload(const T* host, size_t n) {
    KVSTASH_RETURN_IF_ERROR(Allocate(n));
    if (n == 0) return Status::Ok();
    return gpu::CudaStatus(cudaMemcpy(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  Status Upload(const std::vector<T>& host) { return Upload(host.data(), host.size()); }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

struct DeviceLinear {
  uint32_t out = 0, in = 0;
  DeviceArray<int8_t> q;       // [out, in]
  DeviceArray<float> scales;   // [out, groups]
};

struct DeviceLayer {
  DeviceArray<float> attn_norm, ffn_norm, q_norm, k_norm;
  DeviceArray<float> bq, bk, bv;  // q/k/v projection biases (Qwen2), else empty
  DeviceLinear wq, wk, wv, wo, w_gate, w_up, w_down;
};

Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return Status::Ok();
  return gpu::CudaStatus(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy");
}

}  // namespace

struct SpecPredictorCuda::Impl {
  const SpecPredictor* host = nullptr;
  std::vector<DeviceLayer> layers;

  // y [rows, out] = x [rows, in] * W^T: int16 activations per (token, group), as
  // SpecPredictor::Project with activation_bits 16.
  Status Project(const DeviceLinear& w, const float* x, uint32_t rows, int16_t* aq, float* ascale,
                 float* y) const {
    const int group = host->options_.group;
    const int m = static_cast<int>(rows), n = static_cast<int>(w.out), k = static_cast<int>(w.in);
    KVSTASH_RETURN_IF_ERROR(gpu::QuantizeRowsInt16Device(x, m, k, group, aq, ascale, nullptr));
    return gpu::Int16x8GemmGroupedDevice(aq, ascale, w.q.get(), w.scales.get(), y, m, n, k, group,
                                         nullptr);
  }
};

SpecPredictorCuda::SpecPredictorCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpecPredictorCuda::~SpecPredictorCuda() = default;

Result<std::unique_ptr<SpecPredictorCuda>> SpecPredictorCuda::Create(const SpecPredictor& predictor) {
  if (predictor.options_.arithmetic != SpecPredictorOptions::Arithmetic::kInt) {
    return Status::NotSupported("GPU spec predictor: the ggml variant runs on the CPU only");
  }
  if (predictor.options_.activation_bits != 16) {
    return Status::NotSupported("GPU spec predictor: W8A16 variants only");
  }
  if (predictor.options_.attention != SpecPredictorOptions::Attention::kFp32) {
    return Status::NotSupported(
        "GPU spec predictor: fp32 attention only (the -attn8 variants run on the CPU)");
  }
  auto impl = std::make_unique<Impl>();
  impl->host = &predictor;
  impl->layers.resize(predictor.layers_.size());
  for (size_t l = 0; l < predictor.layers_.size(); ++l) {
    const SpecPredictor::Layer& src = predictor.layers_[l];
    DeviceLayer& dst = impl->layers[l];
    KVSTASH_RETURN_IF_ERROR(dst.attn_norm.Upload(src.attn_norm));
    KVSTASH_RETURN_IF_ERROR(dst.ffn_norm.Upload(src.ffn_norm));
    KVSTASH_RETURN_IF_ERROR(dst.q_norm.Upload(src.q_norm));
    KVSTASH_RETURN_IF_ERROR(dst.k_norm.Upload(src.k_norm));
    KVSTASH_RETURN_IF_ERROR(dst.bq.Upload(src.bq));
    KVSTASH_RETURN_IF_ERROR(dst.bk.Upload(src.bk));
    KVSTASH_RETURN_IF_ERROR(dst.bv.Upload(src.bv));
    const std::pair<const SpecPredictor::QuantLinear*, DeviceLinear*> projections[] = {
        {&src.wq, &dst.wq},         {&src.wk, &dst.wk},     {&src.wv, &dst.wv},
        {&src.wo, &dst.wo},         {&src.w_gate, &dst.w_gate},
        {&src.w_up, &dst.w_up},     {&src.w_down, &dst.w_down}};
    for (const auto& [q, d] : projections) {
      d->out = q->out;
      d->in = q->in;
      KVSTASH_RETURN_IF_ERROR(d->q.Upload(q->w.q));
      KVSTASH_RETURN_IF_ERROR(d->scales.Upload(q->w.scales));
    }
  }
  return std::unique_ptr<SpecPredictorCuda>(new SpecPredictorCuda(std::move(impl)));
}

Status SpecPredictorCuda::Run(std::span<const uint32_t> tokens, PredictorCache* cache) const {
  const SpecPredictor& P = *impl_->host;
  const ModelConfig& c = P.config_;
  const auto T = static_cast<uint32_t>(tokens.size());
  if (T == 0) return Status::Ok();
  const uint32_t first = cache->tokens;
  // The same argument checks, in the same order, as SpecPredictor::Run.
  if (c.max_positions != 0 && static_cast<uint64_t>(first) + T > c.max_positions) {
    return Status::InvalidArgument("predictor: sequence longer than the model's max positions");
  }
  for (uint32_t t : tokens) {
    if (t >= c.vocab_size) return Status::InvalidArgument("predictor: token id out of vocabulary");
  }
  if (cache->k.size() != c.n_layers) {
    if (cache->tokens != 0) return Status::InvalidArgument("predictor cache has the wrong shape");
    cache->k.assign(c.n_layers, {});
    cache->v.assign(c.n_layers, {});
  }
  const size_t new_kv = static_cast<size_t>(T) * c.kv_dim(), old_kv = static_cast<size_t>(first) * c.kv_dim();
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    if (cache->k[l].size() != old_kv || cache->v[l].size() != old_kv) {
      return Status::InvalidArgument("predictor cache has the wrong shape");
    }
  }
  const uint32_t D = c.hidden, hd = c.head_dim;
  const uint32_t qd = c.q_dim(), kvd = c.kv_dim(), F = c.ffn_hidden;
  const uint32_t keys = first + T;
  const int group = P.options_.group;
  const uint32_t widest = std::max({D, qd, F});
  const size_t max_groups = (widest + group - 1) / group;

  std::vector<float> x_host(static_cast<size_t>(T) * D);
  for (uint32_t t = 0; t < T; ++t) {
    std::copy_n(P.embed_->data() + static_cast<size_t>(tokens[t]) * D, D,
                x_host.data() + static_cast<size_t>(t) * D);
  }
  std::vector<float> cosv, sinv;
  DeterministicRope(first, T, hd, c.rope_theta, &cosv, &sinv);

  DeviceArray<float> x, h, q, k, v, att, tmp, gate, up, cosd, sind, kc, vc, scratch, ascale;
  DeviceArray<int16_t> aq;
  KVSTASH_RETURN_IF_ERROR(x.Upload(x_host));
  KVSTASH_RETURN_IF_ERROR(cosd.Upload(cosv));
  KVSTASH_RETURN_IF_ERROR(sind.Upload(sinv));
  KVSTASH_RETURN_IF_ERROR(h.Allocate(x_host.size()));
  KVSTASH_RETURN_IF_ERROR(tmp.Allocate(x_host.size()));
  KVSTASH_RETURN_IF_ERROR(q.Allocate(static_cast<size_t>(T) * qd));
  KVSTASH_RETURN_IF_ERROR(att.Allocate(static_cast<size_t>(T) * qd));
  KVSTASH_RETURN_IF_ERROR(k.Allocate(static_cast<size_t>(T) * kvd));
  KVSTASH_RETURN_IF_ERROR(v.Allocate(static_cast<size_t>(T) * kvd));
  KVSTASH_RETURN_IF_ERROR(gate.Allocate(static_cast<size_t>(T) * F));
  KVSTASH_RETURN_IF_ERROR(up.Allocate(static_cast<size_t>(T) * F));
  KVSTASH_RETURN_IF_ERROR(kc.Allocate(static_cast<size_t>(keys) * kvd));
  KVSTASH_RETURN_IF_ERROR(vc.Allocate(static_cast<size_t>(keys) * kvd));
  KVSTASH_RETURN_IF_ERROR(scratch.Allocate(static_cast<size_t>(T) * c.n_heads * keys));
  KVSTASH_RETURN_IF_ERROR(aq.Allocate(static_cast<size_t>(T) * widest));
  KVSTASH_RETURN_IF_ERROR(ascale.Allocate(static_cast<size_t>(T) * max_groups));

  const size_t x_bytes = x_host.size() * sizeof(float);
  // New K/V per layer, appended to the caller's cache only when the whole run succeeded.
  std::vector<std::vector<float>> new_k(c.n_layers, std::vector<float>(new_kv));
  std::vector<std::vector<float>> new_v(c.n_layers, std::vector<float>(new_kv));
  const Impl& I = *impl_;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const DeviceLayer& L = I.layers[l];
    KVSTASH_RETURN_IF_ERROR(Copy(h.get(), x.get(), x_bytes, cudaMemcpyDeviceToDevice));
    KVSTASH_RETURN_IF_ERROR(gpu::RmsNormRowsDevice(h.get(), T, D, L.attn_norm.get(), c.rms_eps, nullptr));
    KVSTASH_RETURN_IF_ERROR(I.Project(L.wq, h.get(), T, aq.get(), ascale.get(), q.get()));
    KVSTASH_RETURN_IF_ERROR(I.Project(L.wk, h.get(), T, aq.get(), ascale.get(), k.get()));
    KVSTASH_RETURN_IF_ERROR(I.Project(L.wv, h.get(), T, aq.get(), ascale.get(), v.get()));
    if (c.qkv_bias()) {  // after the projection, before RoPE, as SpecPredictor::Run
      KVSTASH_RETURN_IF_ERROR(gpu::AddBiasRowsDevice(q.get(), T, qd, L.bq.get(), nullptr));
      KVSTASH_RETURN_IF_ERROR(gpu::AddBiasRowsDevice(k.get(), T, kvd, L.bk.get(), nullptr));
      KVSTASH_RETURN_IF_ERROR(gpu::AddBiasRowsDevice(v.get(), T, kvd, L.bv.get(), nullptr));
    }
    if (c.qk_norm()) {
      KVSTASH_RETURN_IF_ERROR(gpu::RmsNormRowsDevice(q.get(), T * c.n_heads, hd, L.q_norm.get(), c.rms_eps, nullptr));
      KVSTASH_RETURN_IF_ERROR(gpu::RmsNormRowsDevice(k.get(), T * c.n_kv_heads, hd, L.k_norm.get(), c.rms_eps, nullptr));
    }
    KVSTASH_RETURN_IF_ERROR(gpu::RopeDevice(q.get(), T, c.n_heads, hd, cosd.get(), sind.get(), nullptr));
    KVSTASH_RETURN_IF_ERROR(gpu::RopeDevice(k.get(), T, c.n_kv_heads, hd, cosd.get(), sind.get(), nullptr));
    // The cache: earlier tokens from the host, then this run's rows.
    KVSTASH_RETURN_IF_ERROR(Copy(kc.get(), cache->k[l].data(), old_kv * sizeof(float), cudaMemcpyHostToDevice));
    KVSTASH_RETURN_IF_ERROR(Copy(vc.get(), cache->v[l].data(), old_kv * sizeof(float), cudaMemcpyHostToDevice));
    KVSTASH_RETURN_IF_ERROR(Copy(kc.get() + old_kv, k.get(), new_kv * sizeof(float), cudaMemcpyDeviceToDevice));
    KVSTASH_RETURN_IF_ERROR(Copy(vc.get() + old_kv, v.get(), new_kv * sizeof(float), cudaMemcpyDeviceToDevice));
    KVSTASH_RETURN_IF_ERROR(Copy(new_k[l].data(), k.get(), new_kv * sizeof(float), cudaMemcpyDeviceToHost));
    KVSTASH_RETURN_IF_ERROR(Copy(new_v[l].data(), v.get(), new_kv * sizeof(float), cudaMemcpyDeviceToHost));
    if (l + 1 == c.n_layers) break;  // the last layer's attention and MLP feed no KV
    KVSTASH_RETURN_IF_ERROR(gpu::CausalAttentionDevice(q.get(), kc.get(), vc.get(), first, T, c.n_heads,
                                                       c.n_kv_heads, hd, scratch.get(), att.get(), nullptr));
    KVSTASH_RETURN_IF_ERROR(I.Project(L.wo, att.get(), T, aq.get(), ascale.get(), tmp.get()));
    KVSTASH_RETURN_IF_ERROR(gpu::AddInPlaceDevice(x.get(), tmp.get(), x_host.size(), nullptr));

    KVSTASH_RETURN_IF_ERROR(Copy(h.get(), x.get(), x_bytes, cudaMemcpyDeviceToDevice));
    KVSTASH_RETURN_IF_ERROR(gpu::RmsNormRowsDevice(h.get(), T, D, L.ffn_norm.get(), c.rms_eps, nullptr));
    KVSTASH_RETURN_IF_ERROR(I.Project(L.w_gate, h.get(), T, aq.get(), ascale.get(), gate.get()));
    KVSTASH_RETURN_IF_ERROR(I.Project(L.w_up, h.get(), T, aq.get(), ascale.get(), up.get()));
    KVSTASH_RETURN_IF_ERROR(gpu::SiluMulDevice(gate.get(), up.get(), static_cast<uint64_t>(T) * F, nullptr));
    KVSTASH_RETURN_IF_ERROR(I.Project(L.w_down, gate.get(), T, aq.get(), ascale.get(), tmp.get()));
    KVSTASH_RETURN_IF_ERROR(gpu::AddInPlaceDevice(x.get(), tmp.get(), x_host.size(), nullptr));
  }
  KVSTASH_RETURN_IF_ERROR(gpu::CudaStatus(cudaDeviceSynchronize(), "spec predictor run"));
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    cache->k[l].insert(cache->k[l].end(), new_k[l].begin(), new_k[l].end());
    cache->v[l].insert(cache->v[l].end(), new_v[l].begin(), new_v[l].end());
  }
  cache->tokens = first + T;
  return Status::Ok();
}

}  // namespace kvstash::model

#endif  // KVSTASH_HAVE_CUDA
