#include "codec/dckv/dckv_calibration.h"

#include <Eigen/Dense>
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

#include "codec/dckv/dckv_correction.h"
#include "codec/dckv/dckv_ridge.h"
#include "codec/entropy/pmf.h"
#include "codec/entropy/table_builder.h"
#include "kvstash/dtype.h"

namespace kvstash::dckv {
namespace {

// Scale buckets: b_j = kBucketMin * kBucketRatio^j, j in [0, kScaleBuckets).
constexpr int kScaleBuckets = 160;
constexpr double kBucketMin = 0.01;
constexpr double kBucketRatio = 1.1;

int ScaleBucket(double b) {
  if (!(b > kBucketMin)) return 0;
  const int j = static_cast<int>(std::lround(std::log(b / kBucketMin) / std::log(kBucketRatio)));
  return std::clamp(j, 0, kScaleBuckets - 1);
}

double BucketScale(int j) { return kBucketMin * std::pow(kBucketRatio, j); }

// The entropy tables of an artifact: one zero-centred Laplace table per used scale
// bucket, in order of first use.
class ScaleTables {
 public:
  explicit ScaleTables(int precision) : precision_(precision) {}
  // Table index for a Laplace scale (mean |residual| in quantisation steps).
  Result<uint16_t> For(double scale) {
    const int bucket = ScaleBucket(scale);
    auto it = bucket_table_.find(bucket);
    if (it == bucket_table_.end()) {
      KVSTASH_ASSIGN_OR_RETURN(auto pmf, entropy::LaplacePmf(16, entropy::SymbolMapping::kTwosComplement, 0.0,
                                                             BucketScale(bucket)));
      entropy::TableBuildOptions tb;
      tb.precision = precision_;
      KVSTASH_ASSIGN_OR_RETURN(auto table, entropy::BuildTable(pmf, tb));
      it = bucket_table_.emplace(bucket, static_cast<uint16_t>(tables_.size())).first;
      tables_.push_back(std::move(table));
    }
    return it->second;
  }
  bool empty() const { return tables_.empty(); }
  Result<std::shared_ptr<const entropy::TableSet>> Finish() {
    KVSTASH_ASSIGN_OR_RETURN(auto set, entropy::TableSet::Create(std::move(tables_)));
    return std::make_shared<const entropy::TableSet>(std::move(set));
  }

 private:
  int precision_;
  std::map<int, uint16_t> bucket_table_;  // scale bucket -> table index
  std::vector<entropy::FrequencyTable> tables_;
};

// Whether a group keeps its context model: its held-out odd-row residuals (odd_abs)
// give fewer estimated bits than the token model's (token_abs) at the steps `step`.
bool ContextPays(const std::vector<double>& odd_abs, const std::vector<double>& token_abs,
                 const std::vector<double>& step) {
  double with = 0, without = 0;
  for (size_t i = 0; i < step.size(); ++i) {
    with += QuantizedLaplaceEntropy(odd_abs[i] / step[i]);
    without += QuantizedLaplaceEntropy(token_abs[i] / step[i]);
  }
  return with < without;
}

using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A group's components as the rate point sees them: `order` lists them by decreasing
// weighted variance s_i lambda_i, sqrt_s[i] = sqrt(s_i) of order[i]. Component order[i]
// gets the step delta / sqrt_s[i]; the active ones are a prefix of `order`.
struct WeightedGroup {
  std::vector<uint32_t> order;
  std::vector<double> sqrt_s;
  std::vector<double> sd;  // sqrt(s_i lambda_i) of order[i], decreasing
};

// Output weights (DckvFitOptions::output_weight) per dimension, index
// ((layer * 2 + kv) * n_kv_heads + head) * head_dim + d, divided by their mean; a
// block's weight applies to each of its head_dim dimensions. Empty stays empty.
Result<std::vector<double>> NormalisedDimWeights(const std::vector<double>& output_weight, uint32_t n_layers,
                                                 uint32_t n_kv_heads, uint32_t head_dim) {
  if (output_weight.empty()) return std::vector<double>{};
  const size_t blocks = 2ull * n_layers * n_kv_heads, dims = blocks * head_dim;
  if (output_weight.size() != blocks && output_weight.size() != dims) {
    return Status::InvalidArgument("dckv calibration: need one output weight per (layer, K/V, head) or per dimension");
  }
  for (double x : output_weight) {
    if (!(x > 0) || !std::isfinite(x)) return Status::InvalidArgument("dckv calibration: output weights must be finite and > 0");
  }
  std::vector<double> w(dims);
  const size_t per = dims / output_weight.size();  // head_dim for block weights, else 1
  double mean = 0;
  for (size_t i = 0; i < dims; ++i) {
    w[i] = output_weight[i / per];
    mean += w[i] / static_cast<double>(dims);
  }
  for (double& x : w) x /= mean;
  return w;
}

// Global dimension index (NormalisedDimWeights) of column c of the group starting at
// `first_layer` (columns: K then V of each layer, heads x head_dim each).
size_t GlobalDim(uint32_t first_layer, uint32_t c, uint32_t head_row) {
  return static_cast<size_t>(first_layer) * 2 * head_row + c;
}

// Output weights of the components (s_i = sum_d w_d u_i[d]^2, w_d the output weight
// of dimension d relative to the mean; all 1 without output weights).
Result<std::vector<WeightedGroup>> WeightGroups(const DckvBasis& basis, const std::vector<double>& output_weight) {
  for (const auto& g : basis.groups) {
    if (!output_weight.empty() && !g.dim_scale.empty()) {
      return Status::InvalidArgument("dckv calibration: output weights given to a weighted basis");
    }
  }
  KVSTASH_ASSIGN_OR_RETURN(const std::vector<double> w,
                           NormalisedDimWeights(output_weight, basis.n_layers, basis.n_kv_heads, basis.head_dim));
  const uint32_t hr = basis.n_kv_heads * basis.head_dim;
  std::vector<WeightedGroup> out(basis.groups.size());
  for (size_t gi = 0; gi < basis.groups.size(); ++gi) {
    const auto& g = basis.groups[gi];
    std::vector<double> s(g.dims, 1.0);
    if (!w.empty()) {
      std::vector<double> dim_w(g.dims);
      for (uint32_t c = 0; c < g.dims; ++c) dim_w[c] = w[GlobalDim(g.first_layer, c, hr)];
      for (uint32_t i = 0; i < g.dims; ++i) {
        const float* u = g.basis.data() + static_cast<size_t>(i) * g.dims;
        double acc = 0;
        for (uint32_t c = 0; c < g.dims; ++c) acc += dim_w[c] * static_cast<double>(u[c]) * u[c];
        s[i] = std::max(acc, 1e-12);
      }
    }
    WeightedGroup& wg = out[gi];
    wg.order.resize(g.dims);
    for (uint32_t i = 0; i < g.dims; ++i) wg.order[i] = i;
    std::stable_sort(wg.order.begin(), wg.order.end(),
                     [&](uint32_t a, uint32_t b) { return s[a] * g.variance[a] > s[b] * g.variance[b]; });
    for (uint32_t i : wg.order) {
      wg.sqrt_s.push_back(std::sqrt(s[i]));
      wg.sd.push_back(std::sqrt(s[i] * g.variance[i]));
    }
  }
  return out;
}

// Active components of a group at step delta: a prefix of its order.
uint32_t ActiveCount(const WeightedGroup& g, double delta, double threshold) {
  uint32_t a = 0;
  while (a < g.sd.size() && g.sd[a] / delta >= threshold) ++a;
  return a;
}

// Estimated bits per token when component order[i] uses step delta / sqrt_s[i]: half
// the rows are coded with the token model's residual scale, half with the odd rows'
// (odd_ratio[g][i] = odd residual / token residual; 1 where unknown).
double EstimatedBits(const DckvBasis& basis, const std::vector<WeightedGroup>& wgs, double delta,
                     double threshold, const std::vector<std::vector<double>>& odd_ratio) {
  double bits = 0;
  for (size_t gi = 0; gi < basis.groups.size(); ++gi) {
    const auto& g = basis.groups[gi];
    const auto& wg = wgs[gi];
    const uint32_t a = ActiveCount(wg, delta, threshold);
    for (uint32_t i = 0; i < a; ++i) {
      const double b = g.token_mean_abs[wg.order[i]] * wg.sqrt_s[i] / delta;
      const double rho = i < odd_ratio[gi].size() ? odd_ratio[gi][i] : 1.0;
      bits += 0.5 * (QuantizedLaplaceEntropy(b) + QuantizedLaplaceEntropy(b * rho));
    }
  }
  return bits;
}

double FindStep(const DckvBasis& basis, const std::vector<WeightedGroup>& wgs, double budget, double threshold,
                double max_sd, const std::vector<std::vector<double>>& odd_ratio) {
  // Bisection on log(delta): bits decrease as delta grows.
  double lo = std::log(max_sd * 1e-6), hi = std::log(max_sd * 1e3);
  for (int it = 0; it < 80; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (EstimatedBits(basis, wgs, std::exp(mid), threshold, odd_ratio) > budget) lo = mid; else hi = mid;
  }
  return std::exp(hi);
}

// Calibration token embeddings z as fp32 [rows, rank]. REQUIRES every token id <
// conditioning.vocab.
Eigen::MatrixXf CalibrationZ(const DckvConditioning& conditioning, const std::vector<uint32_t>& tokens) {
  const uint32_t r = conditioning.rank;
  Eigen::MatrixXf z(static_cast<Eigen::Index>(tokens.size()), r);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const uint16_t* e = conditioning.embed_bf16.data() + static_cast<size_t>(tokens[t]) * r;
    for (uint32_t k = 0; k < r; ++k) z(static_cast<Eigen::Index>(t), k) = std::bit_cast<float>(static_cast<uint32_t>(e[k]) << 16);
  }
  return z;
}

// Two folds of the calibration rows by document (alternate documents; the halves of
// the rows when there is one document): fold[t] in {0, 1}.
// REQUIRES document_rows empty or summing to rows.
std::vector<uint8_t> Folds(uint64_t rows, const std::vector<uint64_t>& document_rows) {
  std::vector<uint8_t> fold(rows, 0);
  if (document_rows.size() < 2) {
    for (uint64_t t = rows / 2; t < rows; ++t) fold[t] = 1;
    return fold;
  }
  uint64_t start = 0;
  for (size_t d = 0; d < document_rows.size(); ++d) {
    std::fill_n(fold.begin() + start, document_rows[d], static_cast<uint8_t>(d % 2));
    start += document_rows[d];
  }
  return fold;
}

// Held-out mean |residual| per target column of a ridge fit: each fold predicted by
// the fit on the other fold. Also returns the fit on all rows.
Result<std::pair<Eigen::MatrixXd, std::vector<double>>> RidgeHeldOut(const Eigen::MatrixXf& feat,
                                                                     const Eigen::MatrixXf& target,
                                                                     const std::vector<uint8_t>& fold,
                                                                     double ridge) {
  std::vector<double> abs_sum(target.cols(), 0.0);
  for (uint8_t f = 0; f < 2; ++f) {
    std::vector<Eigen::Index> train, test;
    for (Eigen::Index t = 0; t < feat.rows(); ++t) (fold[t] == f ? test : train).push_back(t);
    if (train.empty() || test.empty()) return Status::InvalidArgument("dckv calibration: too few rows to fit the conditional models");
    KVSTASH_ASSIGN_OR_RETURN(Eigen::MatrixXd b, FitRidge(feat(train, Eigen::all), target(train, Eigen::all), ridge));
    const Eigen::MatrixXf bf = b.cast<float>();
    Eigen::MatrixXf res = target(test, Eigen::all) - feat(test, Eigen::all) * bf.topRows(feat.cols());
    res.rowwise() -= bf.row(feat.cols());
    for (Eigen::Index i = 0; i < target.cols(); ++i) abs_sum[i] += res.col(i).cast<double>().cwiseAbs().sum();
  }
  for (double& v : abs_sum) v /= static_cast<double>(target.rows());
  KVSTASH_ASSIGN_OR_RETURN(Eigen::MatrixXd all, FitRidge(feat, target, ridge));
  return std::make_pair(std::move(all), std::move(abs_sum));
}

// The checkerboard model (b) of a group's `a` active components: y [rows, a] their
// coefficients in artifact order, p [rank + 1, k] the token map of the first
// k = min(a, max_inputs) of them (read from the neighbours), d [k] their steps.
struct ContextFit {
  uint32_t inputs = 0;
  std::vector<float> map;           // [inputs + rank + 1, a]
  std::vector<double> odd_mean_abs; // [a] held-out E|y_i - mu_i| on the odd rows
};

// The calibration documents: `rows` rows, document_rows (empty: one document).
struct CalibrationDocs {
  uint64_t rows = 0;
  const std::vector<uint64_t>& document_rows;
};

Result<ContextFit> FitContext(const CalibrationDocs& docs_in, const Eigen::MatrixXf& y,
                              const Eigen::MatrixXf& p, const Eigen::RowVectorXf& d, const Eigen::MatrixXf& z,
                              double ridge) {
  const uint32_t r = static_cast<uint32_t>(z.cols());
  const uint32_t a = static_cast<uint32_t>(y.cols());
  const uint32_t k = static_cast<uint32_t>(p.cols());
  // Decoded coefficients of every row under model (a): mu + d_i round((y - mu) / d_i).
  Eigen::MatrixXf mu = z * p.topRows(r);
  mu.rowwise() += p.row(r);
  const Eigen::MatrixXf yk = y.leftCols(k);
  const Eigen::MatrixXf c =
      mu + (((yk - mu).array().rowwise() / d.array()).round().rowwise() * d.array()).matrix();
  // Odd rows of every document and their inputs.
  const std::vector<uint8_t> row_fold = Folds(docs_in.rows, docs_in.document_rows);
  std::vector<Eigen::Index> odd, next;  // next -1: none
  std::vector<uint8_t> fold;
  uint64_t start = 0;
  const std::vector<uint64_t> docs =
      docs_in.document_rows.empty() ? std::vector<uint64_t>{docs_in.rows} : docs_in.document_rows;
  for (uint64_t len : docs) {
    for (uint64_t j = 1; j < len; j += 2) {
      odd.push_back(static_cast<Eigen::Index>(start + j));
      next.push_back(j + 1 < len ? static_cast<Eigen::Index>(start + j + 1) : -1);
      fold.push_back(row_fold[start + j]);
    }
    start += len;
  }
  if (odd.empty()) return Status::InvalidArgument("dckv calibration: no odd rows for the context model");
  const Eigen::Index m = static_cast<Eigen::Index>(odd.size());
  Eigen::MatrixXf feat(m, k + r);
  Eigen::MatrixXf target(m, a);
  for (Eigen::Index j = 0; j < m; ++j) {
    const Eigen::Index t = odd[j];
    if (next[j] < 0) {
      feat.row(j).head(k) = c.row(t - 1);
    } else {
      feat.row(j).head(k) = 0.5f * (c.row(t - 1) + c.row(next[j]));
    }
    feat.row(j).tail(r) = z.row(t);
    target.row(j) = y.row(t);
  }
  // Bring the embedding block to the neighbour block's mean variance so that one
  // ridge penalty shrinks both alike; the map's z rows are rescaled back below.
  auto block_var = [&](Eigen::Index first, Eigen::Index count) {
    const Eigen::MatrixXd b = feat.middleCols(first, count).cast<double>();
    return (b.rowwise() - b.colwise().mean()).squaredNorm() / static_cast<double>(count);
  };
  const double zv = r > 0 ? block_var(k, r) : 0.0;
  const float zs = zv > 0 ? static_cast<float>(std::sqrt(block_var(0, k) / zv)) : 1.0f;
  feat.rightCols(r) *= zs;
  KVSTASH_ASSIGN_OR_RETURN(auto fit, RidgeHeldOut(feat, target, fold, ridge));
  fit.first.middleRows(k, r) *= static_cast<double>(zs);
  ContextFit out;
  out.inputs = k;
  out.map.resize(static_cast<size_t>(k + r + 1) * a);
  for (Eigen::Index row = 0; row < fit.first.rows(); ++row) {
    for (uint32_t i = 0; i < a; ++i) out.map[static_cast<size_t>(row) * a + i] = static_cast<float>(fit.first(row, i));
  }
  out.odd_mean_abs = std::move(fit.second);
  return out;
}

// Reduced token embeddings: PCA of the calibration tokens' embeddings, applied to the
// whole table, bf16.
Result<DckvConditioning> FitConditioning(const DckvRows& rows, uint32_t rank) {
  const uint32_t dim = rows.embed_dim;
  if (!rows.embed || rows.vocab == 0 || dim == 0 || rows.embed->size() != static_cast<size_t>(rows.vocab) * dim) {
    return Status::InvalidArgument("dckv calibration: token ids given without a valid embedding table");
  }
  if (rows.tokens.size() != rows.rows) return Status::InvalidArgument("dckv calibration: need one token id per row");
  uint64_t doc_total = 0;
  for (uint64_t d : rows.document_rows) doc_total += d;
  if (!rows.document_rows.empty() && doc_total != rows.rows) {
    return Status::InvalidArgument("dckv calibration: document row counts do not sum to the rows");
  }
  rank = std::min(rank, dim);
  const Eigen::Index n = static_cast<Eigen::Index>(rows.rows);
  Eigen::Map<const RowMatrixF> table(rows.embed->data(), rows.vocab, dim);
  Eigen::MatrixXf e(n, dim);
  for (Eigen::Index t = 0; t < n; ++t) {
    if (rows.tokens[t] >= rows.vocab) return Status::InvalidArgument("dckv calibration: token id out of range");
    e.row(t) = table.row(rows.tokens[t]);
  }
  if (!e.allFinite()) return Status::InvalidArgument("dckv calibration: non-finite embedding");
  const Eigen::RowVectorXf mean = e.colwise().mean();
  e.rowwise() -= mean;
  const Eigen::MatrixXf cov = (e.transpose() * e) / static_cast<float>(n);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXf> eig(cov);
  if (eig.info() != Eigen::Success) return Status::Internal("dckv calibration: embedding eigen solver failed");
  const Eigen::MatrixXf dirs = eig.eigenvectors().rightCols(rank).rowwise().reverse();  // [dim, rank]
  DckvConditioning c;
  c.vocab = rows.vocab;
  c.rank = rank;
  c.embed_bf16.resize(static_cast<size_t>(rows.vocab) * rank);
  constexpr Eigen::Index kBlock = 4096;
  for (Eigen::Index v0 = 0; v0 < rows.vocab; v0 += kBlock) {
    const Eigen::Index nb = std::min<Eigen::Index>(kBlock, rows.vocab - v0);
    Eigen::MatrixXf blk = table.middleRows(v0, nb);
    blk.rowwise() -= mean;
    const RowMatrixF zr = blk * dirs;
    KVSTASH_RETURN_IF_ERROR(ConvertF32ToBf16(std::span<const float>(zr.data(), zr.size()),
                                             std::span<uint16_t>(c.embed_bf16.data() + v0 * rank, zr.size())));
  }
  return c;
}

}  // namespace

double QuantizedLaplaceEntropy(double b) {
  if (!(b > 0)) return 0.0;
  if (b > 1e4) return std::log2(2.0 * std::exp(1.0) * b);  // high-rate limit
  const double r = std::exp(-1.0 / b);
  const double sr = std::sqrt(r);
  const double p0 = 1.0 - sr;                  // mass of cell 0
  if (p0 >= 1.0 - 1e-15) return 0.0;
  const double c = 1.0 / sr - sr;              // P(|K| = k) = c r^k, k >= 1 (both signs)
  // H = -p0 log p0 - sum_k c r^k log(c r^k / 2)
  //   = -p0 log p0 - (1 - p0) log(c / 2) - c log(r) r / (1 - r)^2
  double h = -(1.0 - p0) * std::log2(c / 2.0) - c * std::log2(r) * r / ((1.0 - r) * (1.0 - r));
  if (p0 > 0) h -= p0 * std::log2(p0);
  return h;
}

Result<DckvBasis> FitDckvBasis(const DckvRows& rows, uint32_t group_layers, const DckvFitOptions& options) {
  if (rows.rows == 0 || rows.n_layers == 0 || rows.n_kv_heads == 0 || rows.head_dim == 0) {
    return Status::InvalidArgument("dckv calibration: no rows");
  }
  if (group_layers == 0) return Status::InvalidArgument("dckv calibration: group_layers is 0");
  const uint64_t hr = static_cast<uint64_t>(rows.n_kv_heads) * rows.head_dim;
  if (rows.k.size() != rows.n_layers || rows.v.size() != rows.n_layers) {
    return Status::InvalidArgument("dckv calibration: need K and V for every layer");
  }
  for (uint32_t l = 0; l < rows.n_layers; ++l) {
    if (rows.k[l].size() != rows.rows * hr || rows.v[l].size() != rows.rows * hr) {
      return Status::InvalidArgument("dckv calibration: layer tensor has the wrong size");
    }
  }
  DckvBasis out;
  out.n_layers = rows.n_layers;
  out.n_kv_heads = rows.n_kv_heads;
  out.head_dim = rows.head_dim;
  out.group_layers = group_layers;
  out.rows = rows.rows;
  const Eigen::Index n = static_cast<Eigen::Index>(rows.rows);
  Eigen::MatrixXf z(n, 0);
  if (!rows.tokens.empty() && options.embed_rank > 0) {
    KVSTASH_ASSIGN_OR_RETURN(out.conditioning, FitConditioning(rows, options.embed_rank));
    out.tokens = rows.tokens;
    out.document_rows = rows.document_rows;
    z = CalibrationZ(out.conditioning, out.tokens);
  }
  const uint32_t rank = out.conditioning.rank;
  KVSTASH_ASSIGN_OR_RETURN(const std::vector<double> dim_weight,
                           NormalisedDimWeights(options.output_weight, rows.n_layers, rows.n_kv_heads, rows.head_dim));
  for (uint32_t first = 0; first < rows.n_layers; first += group_layers) {
    DckvGroupBasis g;
    g.first_layer = first;
    g.layers = std::min(group_layers, rows.n_layers - first);
    g.dims = static_cast<uint32_t>(2 * g.layers * hr);
    const Eigen::Index d = g.dims;
    Eigen::MatrixXf x(n, d);
    for (uint32_t j = 0; j < g.layers; ++j) {
      const auto& k = rows.k[first + j];
      const auto& v = rows.v[first + j];
      for (Eigen::Index t = 0; t < n; ++t) {
        for (uint64_t c = 0; c < hr; ++c) {
          const float kv = k[t * hr + c], vv = v[t * hr + c];
          if (!std::isfinite(kv) || !std::isfinite(vv)) {
            return Status::InvalidArgument("dckv calibration: non-finite value");
          }
          x(t, static_cast<Eigen::Index>(2 * j * hr + c)) = kv;
          x(t, static_cast<Eigen::Index>((2 * j + 1) * hr + c)) = vv;
        }
      }
    }
    const Eigen::VectorXd mean = x.cast<double>().colwise().mean().transpose();
    x.rowwise() -= mean.cast<float>().transpose();
    if (!dim_weight.empty()) {
      g.dim_scale.resize(d);
      for (Eigen::Index c = 0; c < d; ++c) {
        g.dim_scale[c] = static_cast<float>(std::sqrt(dim_weight[GlobalDim(first, static_cast<uint32_t>(c), hr)]));
        x.col(c) *= g.dim_scale[c];
      }
    }
    Eigen::MatrixXf cov = Eigen::MatrixXf::Zero(d, d);
    cov.selfadjointView<Eigen::Lower>().rankUpdate(x.transpose(), 1.0f / static_cast<float>(n));
    cov.triangularView<Eigen::StrictlyUpper>() = cov.transpose();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXf> eig(cov);
    if (eig.info() != Eigen::Success) return Status::Internal("dckv calibration: eigen solver failed");
    // Eigen sorts ascending; reverse to decreasing variance.
    Eigen::MatrixXf w = eig.eigenvectors().rowwise().reverse();  // [d, d] columns = components
    const Eigen::MatrixXf y = x * w;                                // [n, d]
    g.mean.resize(d);
    g.basis.resize(static_cast<size_t>(d) * d);
    g.variance.resize(d);
    g.mean_abs.resize(d);
    for (Eigen::Index i = 0; i < d; ++i) {
      g.mean[i] = static_cast<float>(mean(i));
      g.variance[i] = std::max(0.0, static_cast<double>(eig.eigenvalues()(d - 1 - i)));
      g.mean_abs[i] = y.col(i).cast<double>().cwiseAbs().mean();
      for (Eigen::Index c = 0; c < d; ++c) g.basis[static_cast<size_t>(i) * d + c] = w(c, i);
    }
    g.coeffs.resize(static_cast<size_t>(n) * d);
    Eigen::Map<RowMatrixF>(g.coeffs.data(), n, d) = y;
    // Model (a): ridge of every coefficient on [z, 1].
    g.token_map.assign(static_cast<size_t>(rank + 1) * d, 0.0f);
    g.token_mean_abs = g.mean_abs;
    if (rank > 0) {
      KVSTASH_ASSIGN_OR_RETURN(auto fit,
                               RidgeHeldOut(z, y, Folds(out.rows, out.document_rows), options.token_ridge));
      Eigen::Map<RowMatrixF>(g.token_map.data(), rank + 1, d) = fit.first.cast<float>();
      g.token_mean_abs = std::move(fit.second);
    }
    out.groups.push_back(std::move(g));
  }
  return out;
}

Result<DckvArtifact> MakeDckvArtifact(const DckvBasis& basis, const DckvRateOptions& o) {
  if (basis.groups.empty()) return Status::InvalidArgument("dckv calibration: empty basis");
  if (!(o.target_ratio > 1.0) || !std::isfinite(o.target_ratio)) {
    return Status::InvalidArgument("dckv calibration: target ratio must be > 1");
  }
  if (!(o.active_threshold > 0)) return Status::InvalidArgument("dckv calibration: threshold must be > 0");
  const double budget =
      16.0 * 2.0 * basis.n_layers * basis.n_kv_heads * basis.head_dim / o.target_ratio;
  KVSTASH_ASSIGN_OR_RETURN(const std::vector<WeightedGroup> wgs, WeightGroups(basis, o.output_weight));
  double max_sd = 0;
  for (const auto& wg : wgs) max_sd = std::max(max_sd, wg.sd.empty() ? 0.0 : wg.sd[0]);
  if (!(max_sd > 0)) return Status::InvalidArgument("dckv calibration: rows have no variance");
  const uint32_t rank = basis.conditioning.rank;
  const bool context = o.checkerboard && rank > 0;
  std::vector<std::vector<double>> odd_ratio(basis.groups.size());
  double delta = FindStep(basis, wgs, budget, o.active_threshold, max_sd, odd_ratio);
  std::vector<ContextFit> fits(basis.groups.size());
  if (context) {
    const Eigen::MatrixXf z = CalibrationZ(basis.conditioning, basis.tokens);
    const CalibrationDocs docs{basis.rows, basis.document_rows};
    // Fit at the token-model step, measure the odd rows' residual ratio, find the step
    // again with it, and refit at the final step.
    for (int round = 0; round < 2; ++round) {
      for (size_t gi = 0; gi < basis.groups.size(); ++gi) {
        const auto& g = basis.groups[gi];
        const auto& wg = wgs[gi];
        const uint32_t na = ActiveCount(wg, delta, o.active_threshold);
        fits[gi] = {};
        if (na == 0) continue;
        const uint32_t k = std::min(na, o.context_inputs);
        Eigen::Map<const RowMatrixF> y_all(g.coeffs.data(), static_cast<Eigen::Index>(basis.rows), g.dims);
        const std::vector<Eigen::Index> cols(wg.order.begin(), wg.order.begin() + na);
        Eigen::Map<const RowMatrixF> p_all(g.token_map.data(), rank + 1, g.dims);
        Eigen::RowVectorXf d(k);
        for (uint32_t i = 0; i < k; ++i) d(i) = static_cast<float>(delta / wg.sqrt_s[i]);
        KVSTASH_ASSIGN_OR_RETURN(
            fits[gi], FitContext(docs, y_all(Eigen::all, cols),
                                 p_all(Eigen::all, std::vector<Eigen::Index>(cols.begin(), cols.begin() + k)),
                                 d, z, o.context_ridge));
        std::vector<double> token_abs(na), step(na);
        for (uint32_t i = 0; i < na; ++i) {
          token_abs[i] = g.token_mean_abs[wg.order[i]];
          step[i] = delta / wg.sqrt_s[i];
        }
        if (!ContextPays(fits[gi].odd_mean_abs, token_abs, step)) {
          fits[gi] = {};
          odd_ratio[gi].clear();
          continue;
        }
        if (round == 0) {
          odd_ratio[gi].resize(na);
          for (uint32_t i = 0; i < na; ++i) {
            const double t = g.token_mean_abs[wg.order[i]];
            odd_ratio[gi][i] = t > 0 ? fits[gi].odd_mean_abs[i] / t : 1.0;
          }
        }
      }
      if (round == 0) delta = FindStep(basis, wgs, budget, o.active_threshold, max_sd, odd_ratio);
    }
  }

  DckvArtifact a;
  a.n_layers = basis.n_layers;
  a.n_kv_heads = basis.n_kv_heads;
  a.head_dim = basis.head_dim;
  a.rope_theta = o.rope_theta;
  a.group_layers = basis.group_layers;
  a.raw_head = o.raw_head;
  a.raw_tail = o.raw_tail;
  a.target_ratio = static_cast<float>(o.target_ratio);
  a.conditioning = basis.conditioning;
  ScaleTables tables(o.precision);
  auto table_for = [&](double scale) { return tables.For(scale); };
  for (size_t gi = 0; gi < basis.groups.size(); ++gi) {
    const auto& gb = basis.groups[gi];
    DckvGroup g;
    g.first_layer = gb.first_layer;
    g.layers = gb.layers;
    g.dims = gb.dims;
    g.mean = gb.mean;
    for (float s : gb.dim_scale) g.encode_scale.push_back(s * s);
    const auto& wg = wgs[gi];
    const uint32_t na = ActiveCount(wg, delta, o.active_threshold);
    const bool has_context = context && na > 0 && fits[gi].odd_mean_abs.size() == na;
    for (uint32_t i = 0; i < na; ++i) {
      const uint32_t ci = wg.order[i];
      g.basis.insert(g.basis.end(), gb.basis.begin() + static_cast<size_t>(ci) * gb.dims,
                     gb.basis.begin() + static_cast<size_t>(ci + 1) * gb.dims);
      if (!gb.dim_scale.empty()) {  // decoder rows u_i / sqrt(w)
        float* row = g.basis.data() + g.basis.size() - gb.dims;
        for (uint32_t c = 0; c < gb.dims; ++c) row[c] /= gb.dim_scale[c];
      }
      const float step = static_cast<float>(delta / wg.sqrt_s[i]);
      g.step.push_back(step);
      KVSTASH_ASSIGN_OR_RETURN(uint16_t even, table_for(gb.token_mean_abs[ci] / step));
      KVSTASH_ASSIGN_OR_RETURN(uint16_t odd, table_for((has_context ? fits[gi].odd_mean_abs[i] : gb.token_mean_abs[ci]) / step));
      g.table_index.push_back(even);
      g.odd_table_index.push_back(odd);
    }
    g.token_map.resize(static_cast<size_t>(rank + 1) * na);
    for (uint32_t k = 0; k <= rank; ++k) {
      for (uint32_t i = 0; i < na; ++i) g.token_map[static_cast<size_t>(k) * na + i] = gb.token_map[static_cast<size_t>(k) * gb.dims + wg.order[i]];
    }
    if (has_context) {
      g.context_inputs = fits[gi].inputs;
      g.context_map = std::move(fits[gi].map);
    }
    a.groups.push_back(std::move(g));
  }
  if (tables.empty()) {
    return Status::InvalidArgument("dckv calibration: target ratio leaves no active component");
  }
  KVSTASH_ASSIGN_OR_RETURN(a.tables, tables.Finish());
  return a;
}

Result<DckvArtifact> RefitDckvArtifact(DckvArtifact a, const DckvRows& rows, const DckvRefitOptions& o,
                                       DckvRefitReport* report) {
  if (rows.rows == 0 || rows.n_layers != a.n_layers || rows.n_kv_heads != a.n_kv_heads ||
      rows.head_dim != a.head_dim) {
    return Status::InvalidArgument("dckv refit: the rows have another shape than the transform, or none");
  }
  const uint64_t hr = a.HeadRow();
  if (rows.k.size() != a.n_layers || rows.v.size() != a.n_layers) {
    return Status::InvalidArgument("dckv refit: need K and V for every layer");
  }
  for (uint32_t l = 0; l < a.n_layers; ++l) {
    if (rows.k[l].size() != rows.rows * hr || rows.v[l].size() != rows.rows * hr) {
      return Status::InvalidArgument("dckv refit: layer tensor has the wrong size");
    }
  }
  uint64_t doc_total = 0;
  for (uint64_t d : rows.document_rows) doc_total += d;
  if (!rows.document_rows.empty() && doc_total != rows.rows) {
    return Status::InvalidArgument("dckv refit: document row counts do not sum to the rows");
  }
  const uint32_t rank = a.conditioning.rank;
  const Eigen::Index n = static_cast<Eigen::Index>(rows.rows);
  Eigen::MatrixXf z(n, 0);
  if (rank > 0) {
    if (rows.tokens.size() != rows.rows)
      return Status::InvalidArgument("dckv refit: need one token id per row");
    for (uint32_t t : rows.tokens) {
      if (t >= a.conditioning.vocab) return Status::InvalidArgument("dckv refit: token id out of range");
    }
    z = CalibrationZ(a.conditioning, rows.tokens);
  }
  const std::vector<uint8_t> folds = Folds(rows.rows, rows.document_rows);
  const CalibrationDocs docs{rows.rows, rows.document_rows};
  ScaleTables tables(o.precision);
  DckvRefitReport rep;
  uint32_t next_layer = 0;
  for (DckvGroup& g : a.groups) {
    const uint32_t na = g.n_active();
    const size_t d = g.dims;
    if (g.first_layer != next_layer || g.layers == 0 || g.first_layer + g.layers > a.n_layers ||
        d != 2 * g.layers * hr || g.mean.size() != d || g.basis.size() != na * d ||
        (!g.encode_scale.empty() && (g.encode_scale.size() != d || !g.encoder_basis.empty())) ||
        (!g.encoder_basis.empty() && g.encoder_basis.size() != na * d)) {
      return Status::InvalidArgument("dckv refit: inconsistent transform group");
    }
    for (float st : g.step) {
      if (!(std::isfinite(st) && st > 0))
        return Status::InvalidArgument("dckv refit: steps must be finite and > 0");
    }
    if (Status st = CheckCorrectionNets(g); !st.ok())
      return Status::InvalidArgument("dckv refit: " + st.message());
    next_layer += g.layers;
    // u = e (x - mean), rows [K | V] per layer as FitDckvBasis; y = u W_e^T + g_e(u).
    RowMatrixF u(n, static_cast<Eigen::Index>(d));
    for (uint32_t j = 0; j < g.layers; ++j) {
      const auto& k = rows.k[g.first_layer + j];
      const auto& v = rows.v[g.first_layer + j];
      for (Eigen::Index t = 0; t < n; ++t) {
        for (uint64_t c = 0; c < hr; ++c) {
          const float kv = k[t * hr + c], vv = v[t * hr + c];
          if (!std::isfinite(kv) || !std::isfinite(vv))
            return Status::InvalidArgument("dckv refit: non-finite value");
          const size_t ck = 2 * j * hr + c, cv = (2 * j + 1) * hr + c;
          u(t, static_cast<Eigen::Index>(ck)) = kv - g.mean[ck];
          u(t, static_cast<Eigen::Index>(cv)) = vv - g.mean[cv];
        }
      }
    }
    if (!g.encode_scale.empty()) {
      for (size_t c = 0; c < d; ++c) u.col(static_cast<Eigen::Index>(c)) *= g.encode_scale[c];
    }
    const std::vector<float>& enc = g.encoder_basis.empty() ? g.basis : g.encoder_basis;
    RowMatrixF y_rows =
        u * Eigen::Map<const RowMatrixF>(enc.data(), na, static_cast<Eigen::Index>(d)).transpose();
    if (!g.encoder_net.empty() && na > 0) {
      AddEncoderCorrection(g.encoder_net, g.dims, na, std::span<const float>(u.data(), u.size()),
                           static_cast<uint32_t>(rows.rows), std::span<float>(y_rows.data(), y_rows.size()));
    }
    const Eigen::MatrixXf y = y_rows;
    if (!y.allFinite()) return Status::InvalidArgument("dckv refit: non-finite coefficients");
    // Model (a).
    g.token_map.assign(static_cast<size_t>(rank + 1) * na, 0.0f);
    std::vector<double> token_abs(na);
    for (uint32_t i = 0; i < na; ++i) token_abs[i] = y.col(i).cast<double>().cwiseAbs().mean();
    if (rank > 0 && na > 0) {
      KVSTASH_ASSIGN_OR_RETURN(auto fit, RidgeHeldOut(z, y, folds, o.token_ridge));
      Eigen::Map<RowMatrixF>(g.token_map.data(), rank + 1, na) = fit.first.cast<float>();
      token_abs = std::move(fit.second);
    }
    // Model (b) at the transform's steps.
    g.context_inputs = 0;
    g.context_map.clear();
    std::vector<double> odd_abs = token_abs;
    if (o.checkerboard && rank > 0 && na > 0) {
      const uint32_t k = std::min(na, o.context_inputs);
      Eigen::Map<const RowMatrixF> p_all(g.token_map.data(), rank + 1, na);
      Eigen::RowVectorXf dk(k);
      for (uint32_t i = 0; i < k; ++i) dk(i) = g.step[i];
      KVSTASH_ASSIGN_OR_RETURN(ContextFit fit,
                               FitContext(docs, y, p_all.leftCols(k), dk, z, o.context_ridge));
      const std::vector<double> step(g.step.begin(), g.step.end());
      if (ContextPays(fit.odd_mean_abs, token_abs, step)) {
        g.context_inputs = fit.inputs;
        g.context_map = std::move(fit.map);
        odd_abs = std::move(fit.odd_mean_abs);
      }
    }
    rep.context.push_back(g.context_inputs > 0);
    g.table_index.clear();
    g.odd_table_index.clear();
    for (uint32_t i = 0; i < na; ++i) {
      const float step = g.step[i];
      KVSTASH_ASSIGN_OR_RETURN(uint16_t even, tables.For(token_abs[i] / step));
      KVSTASH_ASSIGN_OR_RETURN(uint16_t odd, tables.For(odd_abs[i] / step));
      g.table_index.push_back(even);
      g.odd_table_index.push_back(odd);
      rep.estimated_bits +=
          0.5 * (QuantizedLaplaceEntropy(token_abs[i] / step) + QuantizedLaplaceEntropy(odd_abs[i] / step));
    }
  }
  if (next_layer != a.n_layers) return Status::InvalidArgument("dckv refit: groups do not cover the layers");
  if (tables.empty()) return Status::InvalidArgument("dckv refit: the transform has no active component");
  KVSTASH_ASSIGN_OR_RETURN(a.tables, tables.Finish());
  if (report) *report = std::move(rep);
  return a;
}

}  // namespace kvstash::dckv
