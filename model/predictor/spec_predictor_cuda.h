// SpecPredictorCuda: SpecPredictor::Run on a CUDA device, with the same output bits as
// the CPU predictor (model/predictor/spec_predictor.h). Built only with KVSTASH_CUDA
// (KVSTASH_HAVE_CUDA defined); tests/gpu_kernels/spec_predictor_run_gpu_test.cc
// compares the two on random models of both architectures and batch splits.
//
// READ ME FIRST
// - Every step is a kernel of gpu_kernels/spec_predictor_kernels.h, each running the
//   CPU's operation order; this class only moves data and sequences them exactly as
//   SpecPredictor::Run does (RMSNorm, W8A16 projections, q/k norm, RoPE, cache append,
//   attention, output projection, residual adds, SwiGLU MLP; the last layer stops
//   after its K/V).
// - W8A16 predictors only (the default variant): Create returns NotSupported for
//   activation_bits 8.
// - The caller's PredictorCache stays on the host: each Run uploads the cached K/V of
//   each layer, appends the new tokens' K/V to it and copies them back. Weights are
//   uploaded once by Create. Simple, not fast: the kernels are one thread per row or
//   element.
//
// Errors: as SpecPredictor::Run (InvalidArgument for bad tokens, too many positions or
// a cache of the wrong shape); Internal for CUDA failures (out of memory, no device).
// Thread-safety: immutable after Create; Run may be called concurrently with distinct
// caches (it uses the default stream and synchronises before returning).
#pragma once

#ifdef KVSTASH_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>

#include "kvstash/result.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::model {

class SpecPredictorCuda {
 public:
  // Uploads the predictor's quantised weights and norms. The predictor must outlive
  // the returned object (its embedding rows are read on the host).
  static Result<std::unique_ptr<SpecPredictorCuda>> Create(const SpecPredictor& predictor);
  ~SpecPredictorCuda();
  SpecPredictorCuda(const SpecPredictorCuda&) = delete;
  SpecPredictorCuda& operator=(const SpecPredictorCuda&) = delete;

  // As SpecPredictor::Run, on the device.
  Status Run(std::span<const uint32_t> tokens, PredictorCache* cache) const;

 private:
  struct Impl;
  explicit SpecPredictorCuda(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::model

#endif  // KVSTASH_HAVE_CUDA
