#include "codec/spec/spec_calibration.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <thread>

#include "codec/entropy/pmf.h"
#include "codec/entropy/table_builder.h"
#include "common/byte_io.h"
#include "numerics/det_math.h"
#include "numerics/parallel_for.h"

namespace kvstash::spec {
namespace {

float TrueValue(std::span<const uint8_t> t, size_t i, DType dtype, float scale) {
  if (dtype == DType::kFP8E4M3) return Fp8E4M3ToF32(t[i]) * scale;
  const uint16_t b = LoadLe<uint16_t>(t.data() + 2 * i);
  return dtype == DType::kF16 ? F16ToF32(b) : Bf16ToF32(b);
}

}  // namespace

Result<SpecCalibrator> SpecCalibrator::Create(const KvLayout& layout,
                                              const CalibrationOptions& options) {
  KVSTASH_RETURN_IF_ERROR(layout.Validate());
  KVSTASH_RETURN_IF_ERROR(options.contexts.Validate());
  if (options.contexts.dtype != layout.dtype) {
    return Status::InvalidArgument("calibration contexts are for another dtype");
  }
  SpecCalibrator c;
  c.layout_ = layout;
  c.options_ = options;
  const size_t channels = 2ull * layout.n_layers * layout.n_kv_heads * layout.head_dim;
  c.sum_sq_.assign(channels, 0.0);
  c.count_.assign(channels, 0);
  c.radius_ = layout.dtype == DType::kFP8E4M3 ? 127 : kHistogramRadius;
  c.hist_.assign(options.contexts.num_tables(), std::vector<uint64_t>(2 * c.radius_ + 1, 0));
  c.far_.assign(options.contexts.num_tables(), 0);
  return c;
}

Status SpecCalibrator::CheckChunk(const KvChunkView& chunk, const PredictedChunk& p) const {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  if (!(chunk.layout == layout_) || p.tokens != chunk.tokens ||
      p.k.size() != layout_.n_layers || p.v.size() != layout_.n_layers) {
    return Status::InvalidArgument("calibration chunk or prediction has another shape");
  }
  return Status::Ok();
}

Status SpecCalibrator::AddVariance(const KvChunkView& chunk, const PredictedChunk& p) {
  KVSTASH_RETURN_IF_ERROR(CheckChunk(chunk, p));
  if (frozen_) return Status::InvalidArgument("AddVariance after FreezeSigma");
  const bool fp8 = layout_.dtype == DType::kFP8E4M3;
  const size_t row = static_cast<size_t>(layout_.n_kv_heads) * layout_.head_dim;
  const size_t n = layout_.ScalarsPerTensor(chunk.tokens);
  for (uint32_t l = 0; l < layout_.n_layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      const float* mu = kv == 0 ? p.k[l] : p.v[l];
      const auto t = kv == 0 ? chunk.K(l) : chunk.V(l);
      const float scale = fp8 ? chunk.scales[2 * l + kv] : 1.0f;
      const size_t base = (2 * static_cast<size_t>(l) + kv) * row;
      for (size_t i = 0; i < n; ++i) {
        const double r = static_cast<double>(TrueValue(t, i, layout_.dtype, scale)) - mu[i];
        if (!std::isfinite(r)) continue;
        sum_sq_[base + i % row] += r * r;
        ++count_[base + i % row];
      }
    }
  }
  return Status::Ok();
}

Status SpecCalibrator::FreezeSigma() {
  log2_sigma_.resize(sum_sq_.size());
  for (size_t c = 0; c < sum_sq_.size(); ++c) {
    const double var = count_[c] ? sum_sq_[c] / static_cast<double>(count_[c]) : 1.0;
    log2_sigma_[c] = static_cast<float>(0.5 * std::log2(std::max(var, 1e-60)));
  }
  frozen_ = true;
  return Status::Ok();
}

Status SpecCalibrator::AddHistogram(const KvChunkView& chunk, const PredictedChunk& p) {
  KVSTASH_RETURN_IF_ERROR(CheckChunk(chunk, p));
  if (!frozen_) return Status::InvalidArgument("AddHistogram before FreezeSigma");
  const bool fp8 = layout_.dtype == DType::kFP8E4M3;
  const size_t row = static_cast<size_t>(layout_.n_kv_heads) * layout_.head_dim;
  const size_t n = layout_.ScalarsPerTensor(chunk.tokens);
  std::vector<uint16_t> ord(n), table(n);
  for (uint32_t l = 0; l < layout_.n_layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      const float* mu = kv == 0 ? p.k[l] : p.v[l];
      const auto t = kv == 0 ? chunk.K(l) : chunk.V(l);
      const float scale = fp8 ? chunk.scales[2 * l + kv] : 1.0f;
      const std::span<const float> ls(log2_sigma_.data() + (2 * static_cast<size_t>(l) + kv) * row, row);
      KVSTASH_RETURN_IF_ERROR(ComputeContexts(options_.contexts, std::span(mu, n), ls, scale, ord, table));
      for (size_t i = 0; i < n; ++i) {
        const uint16_t bits = fp8 ? t[i] : LoadLe<uint16_t>(t.data() + 2 * i);
        const uint16_t sym = ResidualSymbol(layout_.dtype, bits, ord[i]);
        const int d = fp8 ? static_cast<int8_t>(sym) : static_cast<int16_t>(sym);
        if (d >= -radius_ && d <= radius_) {
          ++hist_[table[i]][d + radius_];
        } else {
          ++far_[table[i]];
        }
      }
    }
  }
  return Status::Ok();
}

Result<SpecArtifact> SpecCalibrator::Build() {
  if (!frozen_) return Status::InvalidArgument("Build before FreezeSigma");
  const ContextConfig& cfg = options_.contexts;
  const int bits = cfg.symbol_bits();
  const size_t alphabet = size_t{1} << bits;
  const auto mapping = entropy::SymbolMapping::kTwosComplement;
  auto symbol_of = [&](int d) { return static_cast<size_t>(d) & (alphabet - 1); };

  // Marginal: pooled histogram, +1/2 per symbol, far mass spread over the symbols
  // outside the histogram radius.
  std::vector<double> marginal(alphabet, 0.5);
  double far_total = 0;
  for (size_t t = 0; t < hist_.size(); ++t) {
    for (int d = -radius_; d <= radius_; ++d) marginal[symbol_of(d)] += hist_[t][d + radius_];
    far_total += far_[t];
  }
  const size_t outside = alphabet - (2 * radius_ + 1);
  if (outside > 0) {
    for (size_t s = 0; s < alphabet; ++s) {
      const int64_t v = entropy::SymbolValue(static_cast<uint32_t>(s), bits, mapping);
      if (v < -radius_ || v > radius_) marginal[s] += far_total / outside;
    }
  }
  double msum = 0;
  for (double m : marginal) msum += m;
  for (double& m : marginal) m /= msum;

  // One table: its EM-fitted mixture weights (fits_[t]) and its frequency table.
  const uint32_t n_tables = cfg.num_tables();
  fits_.assign(n_tables, {});
  std::vector<std::optional<entropy::FrequencyTable>> built(n_tables);
  auto fit_table = [&](uint32_t t) -> Status {
    const uint32_t b = t / cfg.frac_bins, j = t % cfg.frac_bins;
    const double sd = std::exp2(cfg.BucketCentre(b));
    KVSTASH_ASSIGN_OR_RETURN(auto tight, entropy::GaussianPmf(bits, mapping, cfg.FracCentre(j), sd));
    KVSTASH_ASSIGN_OR_RETURN(auto wide, entropy::GaussianPmf(bits, mapping, cfg.FracCentre(j), 4 * sd));
    const std::vector<double>* comp[3] = {&tight, &wide, &marginal};
    // Component mass outside the histogram radius (for the "far" count).
    double far_mass[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      double inside = 0;
      for (int d = -radius_; d <= radius_; ++d) inside += (*comp[k])[symbol_of(d)];
      far_mass[k] = std::max(0.0, 1.0 - inside);
    }
    TableFit& fit = fits_[t];
    fit.weights = {0.90, 0.07, 0.03};
    for (uint64_t c : hist_[t]) fit.samples += c;
    fit.samples += far_[t];
    if (fit.samples >= 200) {
      for (int iter = 0; iter < 60; ++iter) {
        double acc[3] = {0, 0, 0};
        auto add = [&](double count, const double p[3]) {
          const double z = fit.weights[0] * p[0] + fit.weights[1] * p[1] + fit.weights[2] * p[2];
          if (z <= 0) return;
          for (int k = 0; k < 3; ++k) acc[k] += count * fit.weights[k] * p[k] / z;
        };
        for (int d = -radius_; d <= radius_; ++d) {
          const uint64_t c = hist_[t][d + radius_];
          if (c == 0) continue;
          const double p[3] = {tight[symbol_of(d)], wide[symbol_of(d)], marginal[symbol_of(d)]};
          add(static_cast<double>(c), p);
        }
        if (far_[t] > 0) add(static_cast<double>(far_[t]), far_mass);
        const double total = acc[0] + acc[1] + acc[2];
        for (int k = 0; k < 3; ++k) fit.weights[k] = std::max(acc[k] / total, 1e-6);
      }
    }
    std::vector<double> pmf(alphabet);
    for (size_t s = 0; s < alphabet; ++s) {
      pmf[s] = fit.weights[0] * tight[s] + fit.weights[1] * wide[s] + fit.weights[2] * marginal[s];
    }
    entropy::TableBuildOptions to;
    to.precision = options_.precision;
    KVSTASH_ASSIGN_OR_RETURN(built[t], entropy::BuildTable(pmf, to));
    return Status::Ok();
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Status> status(n_tables);
  numerics::ParallelFor(n_tables, options_.threads > 0 ? options_.threads : static_cast<int64_t>(hw),
                        [&](uint32_t, uint32_t t) { status[t] = fit_table(t); });
  std::vector<entropy::FrequencyTable> tables;
  for (uint32_t t = 0; t < n_tables; ++t) {
    KVSTASH_RETURN_IF_ERROR(status[t]);
    tables.push_back(std::move(*built[t]));
  }
  KVSTASH_ASSIGN_OR_RETURN(auto set, entropy::TableSet::Create(std::move(tables)));
  SpecArtifact a;
  a.layout = layout_;
  a.contexts = cfg;
  a.predictor_digest = options_.predictor_digest;
  a.predictor_variant = options_.predictor_variant;
  a.log2_sigma = log2_sigma_;
  a.tables = std::make_shared<const entropy::TableSet>(std::move(set));
  return a;
}

}  // namespace kvstash::spec
