// The CUDA side of the determinism manifest (issue 21, docs/determinism.md): the items
// a GPU computes, each named kCudaPrefix ("cuda:") + the manifest item it must equal:
//
//   cuda:predictor.<variant>.<prompt>.kv  SpecPredictorCuda (model/predictor/
//                                         spec_predictor_cuda.h) over the prompt, in the
//                                         batches of Inputs::splits
//   cuda:spec.<prompt>.decoded            gpu::DeviceSpecDecoder of fixtures/spec-<prompt>.kvsp
//                                         against the CUDA predictor's K/V
//   cuda:dckv.hand.decoded                gpu::DeviceDckvDecoder of fixtures/dckv-hand.kvdp
//
// The encoders, artifacts and RWKV-7 coders have no CUDA path; their items stay
// CPU-only. Built only with KVSTASH_CUDA (KVSTASH_HAVE_CUDA).
// Errors: Unavailable without a CUDA device; otherwise as ComputeDigests (a per-item
// failure becomes that item's "error: ..." value).
// Thread-safety: reentrant; uses the default stream.
#pragma once

#include <string>

#include "tests/determinism/determinism.h"

namespace kvstash::determinism {

// Computes the cuda:* items (Inputs::threads does not apply; Inputs::prompts does).
Result<Digests> ComputeCudaDigests(const Inputs& in);

}  // namespace kvstash::determinism
