// dckv calibration: from calibration rows (K before RoPE and V of every layer at real
// token positions) to a DckvArtifact for one rate point (docs/methods.md §2).
//
// Step 1, FitDckvBasis (expensive, once per model and grouping): per layer group the
//   mean m and the covariance C of the rows x (dims = 2 * layers * n_kv_heads *
//   head_dim, K then V per layer), and the eigen-decomposition of C (Eigen's
//   SelfAdjointEigenSolver, fp32): the PCA basis, components by decreasing variance
//   lambda_i, plus the mean absolute coefficient E|y_i| of the calibration rows.
//   With token ids and the model's embedding table: the reduced token embeddings z
//   (PCA of the calibration tokens' embeddings, top `embed_rank` directions, applied
//   to the whole vocabulary and rounded to bf16) and per group the token map of the
//   conditional model (a) (dckv_conditional.h): ridge regression of every coefficient
//   on [z, 1], closed form (Z^T Z + lambda I) P = Z^T Y (penalty token_ridge
//   relative to each feature's scale, dckv_ridge.h; bias unpenalised), with E|y_i - mu_i| of its residual.
//   The coefficients of every calibration row are kept for step 2.
// Step 2, MakeDckvArtifact (cheap, once per rate point): reverse water-filling over
//   all components of all groups for the weighted distortion sum_d w_d (x_d - x^_d)^2.
//   Output weights: w_d is the output weight of dimension d (DckvRateOptions::output_weight:
//   per (layer, K/V, kv head) block, e.g. the measured next-token KL per unit noise
//   variance of that layer's K or V head, or per dimension, e.g. the diagonal Fisher
//   information of tools/dckv_output_fisher.py; normalised to mean 1 over the
//   dimensions; all 1 without), so component i (unit vector u_i) weighs
//   s_i = sum_d w_d u_i[d]^2 and its quantisation error Delta_i^2/12 costs
//   s_i Delta_i^2/12. Equal weighted distortion per component gives
//   Delta_i = Delta / sqrt(s_i); component i is active when
//   sqrt(s_i lambda_i) / Delta >= active_threshold, and the artifact stores the active
//   components by decreasing s_i lambda_i (the checkerboard model reads the first k).
//   Without weights this is the plain MSE allocation: one step Delta for all.
//   With a weighted basis (DckvFitOptions::output_weight) the components are already
//   those of the weighted rows, so one step Delta is the weighted allocation; the
//   artifact's decoder basis rows are u_i / sqrt(w) and its encoder scale w (dckv_artifact.h).
//   Passing output_weight at both steps is InvalidArgument. Delta is found by bisection so that
//   the estimated rate sum_i H_i equals the target bits per token
//   16 * 2 * n_layers * n_kv_heads * head_dim / target_ratio, where H_i is the exact
//   entropy of a Laplace density with E|y| = E|y_i| integrated over the cells of the
//   quantiser (closed form), evaluated at Delta_i. The measured rate differs from the target by the model
//   error of that estimate; the benchmark reports the measured one.
//   With conditioning, H_i averages the even rows' residual scale (token model) and
//   the odd rows' (checkerboard model): Delta is found once with the token residuals,
//   the checkerboard context map is fitted at that Delta, and Delta is found again
//   with the odd rows' measured residual ratio, and the map refitted.
//   Checkerboard fit (model (b)): on the calibration documents, rows at odd index
//   (from the document's first coded row) are regressed on u = [n | z | 1], n the
//   mean of the two neighbouring rows' first k = context_inputs coefficients as the
//   decoder sees them (token mean + quantised residual at this Delta), closed-form
//   ridge (lambda = context_ridge * trace(U_c^T U_c) / dim(u), bias unpenalised).
//   A group keeps the context map only when its held-out residuals give a lower
//   estimated rate than the token model alone.
//   Residual scales (both models) are held out: the calibration documents are split
//   in two folds (alternate documents), each fold's residual comes from the fit on
//   the other; the stored maps are fitted on all rows.
//   Entropy tables: each active component's Laplace scale b_i = E|y_i - mu_i| / Delta
//   (in quantisation steps), per pass, is rounded to a log-spaced scale bucket
//   (ratio 1.1 between buckets); one table per used bucket, 16-bit two's-complement
//   alphabet.
//
// Errors: InvalidArgument for empty rows, inconsistent shapes, group_layers 0,
// target_ratio <= 1, non-finite input.
// Thread-safety: pure functions (Eigen may use its own threads).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "kvstash/result.h"

namespace kvstash::dckv {

// Calibration rows: per layer l, k[l] (before RoPE) and v[l] are [rows, n_kv_heads,
// head_dim] fp32.
// Optional conditioning inputs: token ids of the rows, the documents' row counts
// (consecutive rows of one document are neighbours) and the model's token embedding
// table [vocab, embed_dim] fp32. Without them (tokens empty) no conditional model is
// fitted.
struct DckvRows {
  // No rows yet, one empty K and V vector per layer of the given shape.
  static DckvRows ForShape(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim) {
    DckvRows r;
    r.n_layers = n_layers;
    r.n_kv_heads = n_kv_heads;
    r.head_dim = head_dim;
    r.k.resize(n_layers);
    r.v.resize(n_layers);
    return r;
  }
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  uint64_t rows = 0;
  std::vector<std::vector<float>> k, v;
  std::vector<uint32_t> tokens;          // [rows] or empty
  std::vector<uint64_t> document_rows;   // sums to rows; empty = one document
  std::shared_ptr<const std::vector<float>> embed;  // [vocab, embed_dim]
  uint32_t vocab = 0, embed_dim = 0;
};

// PCA of one layer group, components by decreasing variance.
struct DckvGroupBasis {
  uint32_t first_layer = 0, layers = 0, dims = 0;
  std::vector<float> mean;      // [dims]
  // Weighted PCA (DckvFitOptions::output_weight): sqrt(w_d) of every dimension; the
  // basis, variances and coefficients are those of the scaled rows sqrt(w) (x - m).
  // Empty: plain PCA (all 1).
  std::vector<float> dim_scale;
  std::vector<float> basis;     // [dims components, dims], rows orthonormal
  std::vector<double> variance; // [dims] lambda_i >= 0
  std::vector<double> mean_abs; // [dims] E|y_i| over the calibration rows
  std::vector<float> token_map; // [rank + 1, dims] model (a) over all components
  std::vector<double> token_mean_abs; // [dims] E|y_i - mu_i| under model (a)
  std::vector<float> coeffs;    // [rows, dims] y of every calibration row
};

struct DckvBasis {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  uint32_t group_layers = 0;
  uint64_t rows = 0;
  std::vector<DckvGroupBasis> groups;
  DckvConditioning conditioning;       // rank 0 without token ids
  std::vector<uint32_t> tokens;        // [rows] (empty without)
  std::vector<uint64_t> document_rows;
};

struct DckvFitOptions {
  uint32_t embed_rank = 128;   // reduced embedding size (capped by embed_dim)
  double token_ridge = 1e-3;   // relative ridge penalty of model (a)
  // Output weights, finite and > 0, any scale (normalised to mean 1 over the
  // dimensions), either one per (layer, K/V, kv head) block, index
  // (layer * 2 + kv) * n_kv_heads + head (kv 0 = K, 1 = V), or one per dimension,
  // index ((layer * 2 + kv) * n_kv_heads + head) * head_dim + d (K before RoPE).
  // Non-empty: weighted PCA, i.e. the PCA of the rows scaled by sqrt(w_d), so that the
  // water-filling of step 2 (equal steps) minimises the weighted distortion
  // sum_d w_d (x_d - x^_d)^2 (see "Output weights" above).
  std::vector<double> output_weight;
};

// group_layers: layers per group (the last group takes the remainder).
Result<DckvBasis> FitDckvBasis(const DckvRows& rows, uint32_t group_layers,
                               const DckvFitOptions& options = {});

struct DckvRateOptions {
  double target_ratio = 20.0;      // bf16 bytes / coded bytes, estimated (see above)
  double active_threshold = 0.3;   // sqrt(lambda) / Delta below this: component off
  float rope_theta = 10000.0f;     // the model's RoPE base
  uint32_t raw_head = 4;           // bf16 positions at the start of a prefix
  uint32_t raw_tail = 128;         // bf16 positions at the end of a prefix
  int precision = 12;              // rANS probability precision
  bool checkerboard = true;        // fit model (b) (needs conditioning)
  double context_ridge = 0.05;     // relative ridge penalty of model (b)
  uint32_t context_inputs = 128;   // neighbour components model (b) reads (k)
  // Output weights of an unweighted basis, per block or per dimension as
  // DckvFitOptions::output_weight; empty = all equal (plain MSE). See "Output weights" above.
  std::vector<double> output_weight;
};

Result<DckvArtifact> MakeDckvArtifact(const DckvBasis& basis, const DckvRateOptions& options);

// Step 2 for a fixed transform (a trained codec, dckv_trained.h): the conditional
// models, table indices and tables refitted in closed form, exactly as
// MakeDckvArtifact fits them for its own transform (the same ridge fits, held-out
// folds, context-model test and scale buckets), at the transform's own steps (no
// step search, every component of the transform active).
struct DckvRefitOptions {
  double token_ridge = 1e-3;      // DckvFitOptions::token_ridge
  bool checkerboard = true;       // DckvRateOptions::checkerboard
  double context_ridge = 0.05;    // DckvRateOptions::context_ridge
  uint32_t context_inputs = 128;  // DckvRateOptions::context_inputs
  int precision = 12;             // DckvRateOptions::precision
};

// What RefitDckvArtifact fitted.
struct DckvRefitReport {
  std::vector<bool> context;  // per group: the checkerboard model was kept
  double estimated_bits = 0;  // per coded token: sum_i (H(even scale_i) + H(odd scale_i)) / 2
};

// transform: geometry, conditioning, and per group mean, encode_scale or
// encoder_basis, basis, step and nets (its token maps, context maps, table indices
// and tables are replaced). rows: the calibration rows (DckvRows; token ids needed
// when the conditioning has rank > 0, its embedding table is not read: z comes from
// transform.conditioning). Coefficients are the encoder's: y = W_e u + g_e(u) with
// u = e (x - mean) (dckv_artifact.h). Model (a): ridge of y on [z, 1]
// (token_ridge; with rank 0 the bias 0 and E|y_i|, as FitDckvBasis); model (b): as
// MakeDckvArtifact at the steps `step`, kept only where it lowers the estimated rate;
// tables from the held-out residual scales in steps.
// Errors: InvalidArgument for rows of another shape, missing or out-of-range token
// ids, an inconsistent transform group, non-finite rows, no active component.
Result<DckvArtifact> RefitDckvArtifact(DckvArtifact transform, const DckvRows& rows,
                                       const DckvRefitOptions& options, DckvRefitReport* report = nullptr);

// Entropy in bits of a Laplace density with mean absolute value b (in quantisation
// steps) quantised to integers (cells [k - 1/2, k + 1/2]). b <= 0 gives 0.
double QuantizedLaplaceEntropy(double b);

}  // namespace kvstash::dckv
