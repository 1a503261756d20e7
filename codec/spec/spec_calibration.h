// Calibration of the spec codec: from (true chunk, predictor output) pairs of real
// text to a SpecArtifact (`kvstash calibrate spec`).
//
// Two passes over the same calibration chunks:
//   1. AddVariance: residual r = true - mu in value units per (layer, K/V, kv head,
//      channel); sigma_c^2 = mean r^2 (non-finite values skipped). FreezeSigma() stores
//      log2 sigma_c as the artifact's per-channel spreads.
//   2. AddHistogram: each scalar's context (table index) and residual symbol d are
//      counted per table (|d| <= kHistogramRadius exactly, the rest as one "far" count).
// Build() then fits, per table (bucket b, frac bin j), the weights of a 3-component
// mixture by EM (fixed shapes, weights only; Dempster, Laird & Rubin 1977):
//   tight: Gaussian(mean FracCentre(j), sd 2^BucketCentre(b)) integrated over unit cells,
//   wide:  the same with 4x the sd,
//   marginal: the pooled residual histogram of all tables (+1/2 per symbol smoothing),
// the published method's tight + wide + marginal shape, with weights learned per
// context instead of fixed 0.95 / 0.03 / 0.02; and builds each table with
// entropy::BuildTable at the artifact's precision.
//
// Build() fits the tables on options.threads std::threads (same artifact for any count).
// Thread-safety: not thread-safe; one calibrator per thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/spec/spec_artifact.h"
#include "codec/spec/spec_codec.h"

namespace kvstash::spec {

struct CalibrationOptions {
  ContextConfig contexts;     // contexts.dtype must equal the layout's dtype
  int precision = 13;         // rANS probability bits. Default: 13.
  uint64_t predictor_digest = 0;
  std::string predictor_variant;
  // Threads of Build() (the tables are fitted independently: the artifact does not
  // depend on the count); 0 = std::thread::hardware_concurrency(). Default: 0.
  int threads = 0;
};

// Fitted mixture weights of one table, for reports.
struct TableFit {
  uint64_t samples = 0;
  std::array<double, 3> weights{};  // tight, wide, marginal
};

class SpecCalibrator {
 public:
  static constexpr int kHistogramRadius = 2048;

  // Errors: InvalidArgument for an invalid layout or contexts of another dtype.
  static Result<SpecCalibrator> Create(const KvLayout& layout, const CalibrationOptions& options);

  Status AddVariance(const KvChunkView& chunk, const PredictedChunk& prediction);
  // Ends pass 1. REQUIRES: at least one AddVariance.
  Status FreezeSigma();
  Status AddHistogram(const KvChunkView& chunk, const PredictedChunk& prediction);
  Result<SpecArtifact> Build();

  const std::vector<TableFit>& fits() const { return fits_; }

 private:
  SpecCalibrator() = default;
  Status CheckChunk(const KvChunkView& chunk, const PredictedChunk& prediction) const;

  KvLayout layout_;
  CalibrationOptions options_;
  std::vector<double> sum_sq_;
  std::vector<uint64_t> count_;
  std::vector<float> log2_sigma_;
  bool frozen_ = false;
  int radius_ = 0;                        // histogram radius for this dtype
  std::vector<std::vector<uint64_t>> hist_;  // [table][2 * radius + 1]
  std::vector<uint64_t> far_;                // [table]
  std::vector<TableFit> fits_;
};

}  // namespace kvstash::spec
