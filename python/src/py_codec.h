// The C++ object behind kvstash.PrefixCodec (python/src/codec.cc), shared with the
// optional CUDA bindings (python/src/cuda/cuda_module.cc) that decode its payloads
// on the GPU. Immutable once made. The heavy state (model, spec predictor, spec
// artifact, dckv codec) is shared by every PyCodec made from the same files through
// codec.cc's process-wide cache; the codec borrows the model, so members are destroyed
// codec first (declaration order) and the model outlives it.
#pragma once

#include <memory>

#include "codec/dckv/dckv_codec.h"
#include "codec/spec/spec_artifact.h"
#include "kvstash/prefix_codec.h"
#include "model/forward/model.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::py {

struct PyCodec {
  std::shared_ptr<const model::Model> model;                  // spec, dckv
  std::shared_ptr<const model::SpecPredictor> predictor;      // spec (keeps the model alive too)
  std::shared_ptr<const spec::SpecArtifact> spec_artifact;    // spec
  std::shared_ptr<const dckv::DckvCodec> dckv;                // dckv
  std::unique_ptr<PrefixCodec> codec;                          // last: destroyed first
};

}  // namespace kvstash::py
