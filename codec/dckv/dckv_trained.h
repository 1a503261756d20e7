// Import of a trained dckv codec: the trainer's interchange file (the Python dckv trainer,
// a safetensors file, docs/format/dckv.md "Trained codecs") on top of the closed-form
// base artifact the training started from, as the transform of a new artifact.
//
// The file holds, per group g of the base artifact (n_groups groups, dims each):
//   group.{g}.mean [dims], group.{g}.encoder [n_active, dims] (W_e),
//   group.{g}.decoder [n_active, dims] (W_d), group.{g}.step [n_active] (> 0),
//   group.{g}.scale [n_active] (informational: the import refits the entropy models),
//   optionally group.{g}.decoder_net.{w1 [H, n_active], b1 [H], w2 [dims, H], b2 [dims]}
//   and group.{g}.encoder_net.{w1 [H, dims], b1 [H], w2 [n_active, H], b2 [n_active]},
//   each net all four tensors or none; __metadata__ "format" = kTrainedDckvFormat and
//   "base_artifact_sha256" = hex SHA-256 of the base artifact file's bytes.
// n_active may differ per group (0 <= n_active <= dims).
//
// TrainedDckvTransform returns the base artifact's geometry, raw rows and conditioning
// with, per group, mean, decoder basis W_d, encoder basis W_e (left empty when W_e
// equals W_d bit for bit: then the artifact is written as version 3 or 4), steps and
// nets, no encode scale; its token maps, context maps, table indices and tables are
// empty: RefitDckvArtifact (dckv_calibration.h) fits them on calibration rows. A -0.0
// in a trained mean is stored as +0.0 (the same value; the decoder-net contract refuses
// -0.0, dckv_correction.h).
//
// Errors: Mismatch when base_artifact_sha256 is not the SHA-256 of `base`; Corruption
// for a malformed safetensors file (safetensors.h: also NaN or infinite values) or
// base artifact (DckvArtifact::Parse); InvalidArgument, naming the tensor, for a
// missing format tag, a missing or unexpected tensor, a shape that does not fit the
// base geometry, a net with some but not all of its four tensors, a step <= 0, a net
// outside the limits of CheckCorrectionNets.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "codec/dckv/dckv_artifact.h"
#include "kvstash/result.h"

namespace kvstash::dckv {

inline constexpr char kTrainedDckvFormat[] = "kvstash-dckv-trained/1";

struct DckvTrainedTransform {
  DckvArtifact transform;                       // see above (no tables)
  std::map<std::string, std::string> metadata;  // the file's __metadata__
};

// trained: the interchange file's bytes; base: the base artifact file's bytes.
Result<DckvTrainedTransform> TrainedDckvTransform(std::span<const uint8_t> trained,
                                                  std::span<const uint8_t> base);

}  // namespace kvstash::dckv
