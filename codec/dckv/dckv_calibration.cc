#include "codec/dckv/dckv_calibration.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>

#include "codec/entropy/pmf.h"
#include "codec/entropy/table_builder.h"

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

// Estimated bits per token when every active component uses step delta.
double EstimatedBits(const DckvBasis& basis, double delta, double threshold) {
  double bits = 0;
  for (const auto& g : basis.groups) {
    for (uint32_t i = 0; i < g.dims; ++i) {
      if (std::sqrt(g.variance[i]) / delta < threshold) continue;
      bits += QuantizedLaplaceEntropy(g.mean_abs[i] / delta);
    }
  }
  return bits;
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

Result<DckvBasis> FitDckvBasis(const DckvRows& rows, uint32_t group_layers) {
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
  double max_sd = 0;
  for (const auto& g : basis.groups) max_sd = std::max(max_sd, std::sqrt(g.variance[0]));
  if (!(max_sd > 0)) return Status::InvalidArgument("dckv calibration: rows have no variance");
  // Bisection on log(delta): bits decrease as delta grows.
  double lo = std::log(max_sd * 1e-6), hi = std::log(max_sd * 1e3);
  for (int it = 0; it < 80; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (EstimatedBits(basis, std::exp(mid), o.active_threshold) > budget) lo = mid; else hi = mid;
  }
  const double delta = std::exp(hi);

  DckvArtifact a;
  a.n_layers = basis.n_layers;
  a.n_kv_heads = basis.n_kv_heads;
  a.head_dim = basis.head_dim;
  a.rope_theta = o.rope_theta;
  a.group_layers = basis.group_layers;
  a.raw_head = o.raw_head;
  a.raw_tail = o.raw_tail;
  a.target_ratio = static_cast<float>(o.target_ratio);
  std::map<int, uint16_t> bucket_table;  // scale bucket -> table index
  std::vector<entropy::FrequencyTable> tables;
  for (const auto& gb : basis.groups) {
    DckvGroup g;
    g.first_layer = gb.first_layer;
    g.layers = gb.layers;
    g.dims = gb.dims;
    g.mean = gb.mean;
    for (uint32_t i = 0; i < gb.dims; ++i) {
      if (std::sqrt(gb.variance[i]) / delta < o.active_threshold) continue;
      const int bucket = ScaleBucket(gb.mean_abs[i] / delta);
      auto it = bucket_table.find(bucket);
      if (it == bucket_table.end()) {
        KVSTASH_ASSIGN_OR_RETURN(
            auto pmf, entropy::LaplacePmf(16, entropy::SymbolMapping::kTwosComplement, 0.0,
                                          BucketScale(bucket)));
        entropy::TableBuildOptions tb;
        tb.precision = o.precision;
        KVSTASH_ASSIGN_OR_RETURN(auto table, entropy::BuildTable(pmf, tb));
        it = bucket_table.emplace(bucket, static_cast<uint16_t>(tables.size())).first;
        tables.push_back(std::move(table));
      }
      g.basis.insert(g.basis.end(), gb.basis.begin() + static_cast<size_t>(i) * gb.dims,
                     gb.basis.begin() + static_cast<size_t>(i + 1) * gb.dims);
      g.step.push_back(static_cast<float>(delta));
      g.table_index.push_back(it->second);
    }
    a.groups.push_back(std::move(g));
  }
  if (tables.empty()) {
    return Status::InvalidArgument("dckv calibration: target ratio leaves no active component");
  }
  KVSTASH_ASSIGN_OR_RETURN(auto set, entropy::TableSet::Create(std::move(tables)));
  a.tables = std::make_shared<const entropy::TableSet>(std::move(set));
  return a;
}

}  // namespace kvstash::dckv
