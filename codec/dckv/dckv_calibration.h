// dckv calibration: from calibration rows (K before RoPE and V of every layer at real
// token positions) to a DckvArtifact for one rate point (methods.md §2).
//
// Step 1, FitDckvBasis (expensive, once per model and grouping): per layer group the
//   mean m and the covariance C of the rows x (dims = 2 * layers * n_kv_heads *
//   head_dim, K then V per layer), and the eigen-decomposition of C (Eigen's
//   SelfAdjointEigenSolver, fp32): the PCA basis, components by decreasing variance
//   lambda_i, plus the mean absolute coefficient E|y_i| of the calibration rows.
// Step 2, MakeDckvArtifact (cheap, once per rate point): reverse water-filling over
//   all components of all groups. Every active component gets the same step Delta
//   (equal distortion Delta^2/12 per component); a component is active when
//   sqrt(lambda_i) / Delta >= active_threshold. Delta is found by bisection so that
//   the estimated rate sum_i H_i equals the target bits per token
//   16 * 2 * n_layers * n_kv_heads * head_dim / target_ratio, where H_i is the exact
//   entropy of a Laplace density with E|y| = E|y_i| integrated over the cells of the
//   quantiser (closed form). The measured rate differs from the target by the model
//   error of that estimate; the benchmark reports the measured one.
//   Entropy tables: each active component's Laplace scale b_i = E|y_i| / Delta (in
//   quantisation steps) is rounded to a log-spaced bucket (kScaleBuckets per decade
//   ratio below); one table per used bucket, 16-bit two's-complement alphabet.
//
// Errors: InvalidArgument for empty rows, inconsistent shapes, group_layers 0,
// target_ratio <= 1, non-finite input.
// Thread-safety: pure functions (Eigen may use its own threads).
#pragma once

#include <cstdint>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "common/result.h"

namespace kvstash::dckv {

// Calibration rows: per layer l, k[l] (before RoPE) and v[l] are [rows, n_kv_heads,
// head_dim] fp32.
struct DckvRows {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  uint64_t rows = 0;
  std::vector<std::vector<float>> k, v;
};

// PCA of one layer group, components by decreasing variance.
struct DckvGroupBasis {
  uint32_t first_layer = 0, layers = 0, dims = 0;
  std::vector<float> mean;      // [dims]
  std::vector<float> basis;     // [dims components, dims], rows orthonormal
  std::vector<double> variance; // [dims] lambda_i >= 0
  std::vector<double> mean_abs; // [dims] E|y_i| over the calibration rows
};

struct DckvBasis {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  uint32_t group_layers = 0;
  uint64_t rows = 0;
  std::vector<DckvGroupBasis> groups;
};

// group_layers: layers per group (the last group takes the remainder).
Result<DckvBasis> FitDckvBasis(const DckvRows& rows, uint32_t group_layers);

struct DckvRateOptions {
  double target_ratio = 20.0;      // bf16 bytes / coded bytes, estimated (see above)
  double active_threshold = 0.3;   // sqrt(lambda) / Delta below this: component off
  float rope_theta = 10000.0f;     // the model's RoPE base
  uint32_t raw_head = 4;           // bf16 positions at the start of a prefix
  uint32_t raw_tail = 128;         // bf16 positions at the end of a prefix
  int precision = 12;              // rANS probability precision
};

Result<DckvArtifact> MakeDckvArtifact(const DckvBasis& basis, const DckvRateOptions& options);

// Entropy in bits of a Laplace density with mean absolute value b (in quantisation
// steps) quantised to integers (cells [k - 1/2, k + 1/2]). b <= 0 gives 0.
double QuantizedLaplaceEntropy(double b);

}  // namespace kvstash::dckv
