// The C++ object behind kvstash.PrefixCodec (python/src/codec.cc), shared with the
// optional CUDA bindings (python/src/cuda/cuda_module.cc) that decode its payloads
// on the GPU. Immutable once made; the codec borrows the model and predictor, so
// members are destroyed codec first.
#pragma once

#include <memory>

#include "kvstash/prefix_codec.h"
#include "model/forward/model.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::py {

struct PyCodec {
  std::unique_ptr<model::Model> model;
  std::shared_ptr<const model::SpecPredictor> predictor;
  std::unique_ptr<PrefixCodec> codec;
};

}  // namespace kvstash::py
