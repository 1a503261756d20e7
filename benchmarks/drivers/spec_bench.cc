#include "benchmarks/drivers/spec_bench.h"

#include <zstd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "benchmarks/drivers/spec_bench_kv.h"
#include "codec/baselines/byte_plane.h"
#include "codec/spec/ordinal.h"
#include "codec/spec/spec_codec.h"
#include "common/byte_io.h"
#include "common/logging.h"
#include "model/forward/kv_export.h"
#include "model/formats/model_loader.h"
#include "model/predictor/spec_predictor.h"
#include "model/corpus/text_corpus.h"

namespace kvstash::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Status WriteArtifact(const spec::SpecArtifact& art, const std::string& dir, const std::string& variant) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/spec-" + variant + "-" + std::string(DTypeName(art.layout.dtype)) + ".kvsa";
  std::ofstream f(path, std::ios::binary);
  const auto bytes = art.Serialize();
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) return Status::IOError("cannot write " + path);
  KVSTASH_LOG_INFO("wrote spec artifact {} ({} bytes)", path, bytes.size());
  return Status::Ok();
}

// Gaussian mass of [lo, hi] (value units), tails without cancellation.
double GaussCell(double lo, double hi, double mu, double sd) {
  const double k = 1.0 / (sd * std::sqrt(2.0));
  if (lo >= mu) return 0.5 * (std::erfc((lo - mu) * k) - std::erfc((hi - mu) * k));
  if (hi <= mu) return 0.5 * (std::erfc((mu - hi) * k) - std::erfc((mu - lo) * k));
  return 1.0 - 0.5 * std::erfc((mu - lo) * k) - 0.5 * std::erfc((hi - mu) * k);
}

// Value of the stored symbol with ordinal o (bf16 or scaled fp8).
double StoredValue(DType dt, uint32_t o, float scale) {
  if (dt == DType::kFP8E4M3) return Fp8E4M3ToF32(spec::Fp8FromOrdinal(static_cast<uint8_t>(o))) * scale;
  return Bf16ToF32(spec::Bf16FromOrdinal(static_cast<uint16_t>(o)));
}

// Ideal code length (bits) of one tensor under the published model.
double PublishedBits(DType dt, std::span<const uint8_t> t, const float* mu, size_t n,
                     const std::vector<double>& sigma_row, const std::vector<double>& marginal,
                     float scale) {
  const bool fp8 = dt == DType::kFP8E4M3;
  const uint32_t max_o = fp8 ? 255 : 65535;
  double bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = fp8 ? t[i] : LoadLe<uint16_t>(t.data() + 2 * i);
    const uint32_t o = fp8 ? spec::Fp8Ordinal(static_cast<uint8_t>(b)) : spec::Bf16Ordinal(b);
    const double x = StoredValue(dt, o, scale);
    double p = 0;
    if (std::isfinite(x)) {
      const double below = o > 0 ? StoredValue(dt, o - 1, scale) : -INFINITY;
      const double above = o < max_o ? StoredValue(dt, o + 1, scale) : INFINITY;
      const double lo = std::isfinite(below) ? 0.5 * (below + x) : -INFINITY;
      const double hi = std::isfinite(above) ? 0.5 * (above + x) : INFINITY;
      const double sd = sigma_row[i % sigma_row.size()];
      if (fp8) {
        p = GaussCell(lo, hi, mu[i], sd);
      } else {
        p = 0.95 * GaussCell(lo, hi, mu[i], sd) + 0.03 * GaussCell(lo, hi, mu[i], 3 * sd);
      }
    }
    if (!fp8) p += 0.02 * marginal[b];
    bits += -std::log2(std::max(p, 1e-9));  // floor: an fp8 outlier costs ~30 bits
  }
  return bits;
}

nlohmann::json Row(const std::string& codec, DType dt, uint64_t tokens, uint64_t raw,
                   double stored, double scalars, double ideal_bits, nlohmann::json lossless,
                   double enc_s, double dec_s, nlohmann::json cost) {
  nlohmann::json r;
  r["codec"] = codec;
  r["dtype"] = DTypeName(dt);
  r["tokens"] = tokens;
  r["raw_bytes"] = raw;
  r["stored_bytes"] = static_cast<uint64_t>(std::ceil(stored));
  r["ratio"] = raw / stored;
  r["bits_per_scalar"] = 8.0 * stored / scalars;
  r["ideal_bits_per_scalar"] = ideal_bits > 0 ? nlohmann::json(ideal_bits / scalars) : nlohmann::json();
  r["lossless"] = lossless;
  r["encode_mb_s"] = enc_s > 0 ? nlohmann::json(raw / enc_s / 1e6) : nlohmann::json();
  r["decode_mb_s"] = dec_s > 0 ? nlohmann::json(raw / dec_s / 1e6) : nlohmann::json();
  r["predictor_cost_vs_prefill"] = cost;
  return r;
}

}  // namespace

Result<nlohmann::json> RunSpecBench(const SpecBenchOptions& o) {
  KVSTASH_ASSIGN_OR_RETURN(auto kv, LoadSpecBenchKv(o, /*with_published=*/true, "spec"));
  const auto& target = kv->target;
  const auto& predictor = kv->predictor;
  const model::SpecPredictorOptions& po = kv->predictor_options;
  const double prefill_s = kv->eval_times.prefill_s, predictor_s = kv->eval_times.predictor_s;
  const double cost = predictor_s / prefill_s;
  const auto& cal_chunks = kv->cal_chunks;
  const auto& eval_chunks = kv->eval_chunks;
  const model::ModelConfig& mc = target->config;
  Digest256 fingerprint{};  // the benchmark never mixes models

  nlohmann::json out;
  out["setup"] = {{"model", o.model_path}, {"predictor", po.VariantName()},
                  {"calibration_tokens", cal_chunks.size() * o.chunk_tokens},
                  {"evaluation_tokens", eval_chunks.size() * o.chunk_tokens},
                  {"chunk_tokens", o.chunk_tokens}, {"prefill_s", prefill_s}, {"predictor_s", predictor_s},
                  {"calibration_files", model::CorpusFiles(model::CorpusSplit::kCalibration)},
                  {"evaluation_files", model::CorpusFiles(model::CorpusSplit::kEvaluation)}};
  out["rows"] = nlohmann::json::array();

  for (DType dt : o.dtypes) {
    const KvLayout L{mc.n_layers, mc.n_kv_heads, mc.head_dim, dt};
    const bool fp8 = dt == DType::kFP8E4M3;
    const size_t row = static_cast<size_t>(L.n_kv_heads) * L.head_dim;
    const std::vector<float> scales = fp8 ? Fp8Scales(cal_chunks, L) : std::vector<float>();
    auto chunk_of = [&](const ChunkRef& c) {
      return model::ToKvChunk(c.doc->target, c.begin, c.end, dt, scales);
    };
    std::vector<KvChunk> cal;
    for (const ChunkRef& c : cal_chunks) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk k, chunk_of(c));
      cal.push_back(std::move(k));
    }

    // Per-channel means (the "no predictor" baseline's prediction), broadcast to a chunk.
    std::vector<std::vector<float>> mean_k(L.n_layers), mean_v(L.n_layers);
    {
      std::vector<double> sum(2 * L.n_layers * row, 0.0);
      for (const KvChunk& k : cal) {
        for (uint32_t l = 0; l < L.n_layers; ++l) {
          for (int kv = 0; kv < 2; ++kv) {
            const auto t = kv ? k.view().V(l) : k.view().K(l);
            for (size_t i = 0; i < L.ScalarsPerTensor(k.tokens); ++i) {
              const double x = fp8 ? Fp8E4M3ToF32(t[i]) * scales[2 * l + kv] : Bf16ToF32(LoadLe<uint16_t>(t.data() + 2 * i));
              if (std::isfinite(x)) sum[(2 * l + kv) * row + i % row] += x;
            }
          }
        }
      }
      const double n = static_cast<double>(cal.size()) * o.chunk_tokens;
      for (uint32_t l = 0; l < L.n_layers; ++l) {
        mean_k[l].resize(o.chunk_tokens * row);
        mean_v[l].resize(o.chunk_tokens * row);
        for (size_t i = 0; i < mean_k[l].size(); ++i) {
          mean_k[l][i] = static_cast<float>(sum[(2 * l) * row + i % row] / n);
          mean_v[l][i] = static_cast<float>(sum[(2 * l + 1) * row + i % row] / n);
        }
      }
    }
    spec::PredictedChunk mean_pred;
    mean_pred.tokens = o.chunk_tokens;
    for (uint32_t l = 0; l < L.n_layers; ++l) {
      mean_pred.k.push_back(mean_k[l].data());
      mean_pred.v.push_back(mean_v[l].data());
    }

    // Calibrate our coder and the per-channel baseline.
    KVSTASH_ASSIGN_OR_RETURN(spec::SpecArtifact art,
                             Calibrate(L, cal, cal_chunks, *predictor, po.VariantName(), nullptr));
    KVSTASH_ASSIGN_OR_RETURN(spec::SpecArtifact art_mean,
                             Calibrate(L, cal, cal_chunks, *predictor, "per-channel-mean", &mean_pred));
    if (!o.artifact_dir.empty()) {
      KVSTASH_RETURN_IF_ERROR(WriteArtifact(art, o.artifact_dir, po.VariantName()));
    }

    // Published model parameters: per-channel sigma of the FP8-block predictor's
    // residual and the bf16 symbol marginal, from the calibration set.
    std::vector<std::vector<double>> pub_sigma(2 * L.n_layers, std::vector<double>(row, 0.0));
    std::vector<double> marginal(fp8 ? 256 : 65536, 0.5);
    {
      std::vector<std::vector<double>> cnt = pub_sigma;
      for (size_t c = 0; c < cal.size(); ++c) {
        const auto pp = spec::PredictedSlice(cal_chunks[c].doc->published, L, cal_chunks[c].begin, cal_chunks[c].end);
        for (uint32_t l = 0; l < L.n_layers; ++l) {
          for (int kv = 0; kv < 2; ++kv) {
            const auto t = kv ? cal[c].view().V(l) : cal[c].view().K(l);
            const float* mu = kv ? pp.v[l] : pp.k[l];
            for (size_t i = 0; i < L.ScalarsPerTensor(o.chunk_tokens); ++i) {
              const uint16_t b = fp8 ? t[i] : LoadLe<uint16_t>(t.data() + 2 * i);
              marginal[b] += 1.0;
              const double x = fp8 ? Fp8E4M3ToF32(static_cast<uint8_t>(b)) * scales[2 * l + kv] : Bf16ToF32(b);
              if (!std::isfinite(x)) continue;
              pub_sigma[2 * l + kv][i % row] += (x - mu[i]) * (x - mu[i]);
              cnt[2 * l + kv][i % row] += 1.0;
            }
          }
        }
      }
      for (size_t k = 0; k < pub_sigma.size(); ++k) {
        for (size_t i = 0; i < row; ++i) pub_sigma[k][i] = std::sqrt(std::max(pub_sigma[k][i] / cnt[k][i], 1e-30));
      }
      double total = 0;
      for (double m : marginal) total += m;
      for (double& m : marginal) m /= total;
    }

    // Evaluation.
    uint64_t raw = 0, spec_bytes = 0, mean_bytes = 0, bp_bytes = 0, zstd_bytes = 0;
    double spec_ideal = 0, pub_bits = 0, enc_s = 0, dec_s = 0, bp_enc = 0, bp_dec = 0, z_enc = 0;
    bool spec_ok = true, mean_ok = true, bp_ok = true, z_ok = true;
    std::vector<double> layer_bytes(2 * L.n_layers, 0.0);
    const size_t n = L.ScalarsPerTensor(o.chunk_tokens);
    std::vector<uint16_t> ord(n), table(n);
    // Each artifact's digest once, as PrefixCodec holds it: not in the coding times.
    const Digest256 art_digest = art.Digest(), mean_digest = art_mean.Digest();
    for (const ChunkRef& c : eval_chunks) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, chunk_of(c));
      const auto pred = spec::PredictedSlice(c.doc->pred, L, c.begin, c.end);
      raw += chunk.data.size();
      auto t0 = Clock::now();
      KVSTASH_ASSIGN_OR_RETURN(auto payload,
                               spec::EncodeSpecPayload(art, art_digest, chunk.view(), pred, fingerprint, c.begin));
      auto t1 = Clock::now();
      auto back = spec::DecodeSpecPayload(art, art_digest, payload, pred, fingerprint);
      auto t2 = Clock::now();
      enc_s += Secs(t0, t1);
      dec_s += Secs(t1, t2);
      spec_ok &= back.ok() && back->data == chunk.data && back->scales == chunk.scales;
      spec_bytes += payload.size();
      // Per-stream sizes: header 136, u64 digest, u32 count, [fp8 scales], sizes.
      const size_t sizes_at = 136 + 12 + (fp8 ? 8ull * L.n_layers : 0);
      for (uint32_t s = 0; s < 2 * L.n_layers; ++s) layer_bytes[s] += LoadLe<uint32_t>(payload.data() + sizes_at + 4 * s);
      // Ideal code length of our tables (what the rANS stream approximates).
      for (uint32_t l = 0; l < L.n_layers; ++l) {
        for (uint32_t kv = 0; kv < 2; ++kv) {
          const float* mu = kv ? pred.v[l] : pred.k[l];
          KVSTASH_RETURN_IF_ERROR(spec::ComputeContexts(art.contexts, std::span(mu, n), art.Log2Sigma(l, kv),
                                                        fp8 ? scales[2 * l + kv] : 1.0f, ord, table));
          const auto t = kv ? chunk.view().V(l) : chunk.view().K(l);
          for (size_t i = 0; i < n; ++i) {
            const uint16_t bits = fp8 ? t[i] : LoadLe<uint16_t>(t.data() + 2 * i);
            const uint16_t sym = spec::ResidualSymbol(dt, bits, ord[i]);
            const auto& ft = art.tables->table(table[i]);
            double p = ft.Probability(sym);
            spec_ideal += -std::log2(p);
          }
          const auto pp = spec::PredictedSlice(c.doc->published, L, c.begin, c.end);
          pub_bits += PublishedBits(dt, t, kv ? pp.v[l] : pp.k[l], n, pub_sigma[2 * l + kv], marginal,
                                    fp8 ? scales[2 * l + kv] : 1.0f);
        }
      }
      // Per-channel statistics without a predictor.
      KVSTASH_ASSIGN_OR_RETURN(auto mp, spec::EncodeSpecPayload(art_mean, mean_digest, chunk.view(), mean_pred,
                                                                 fingerprint, c.begin));
      auto mb = spec::DecodeSpecPayload(art_mean, mean_digest, mp, mean_pred, fingerprint);
      mean_ok &= mb.ok() && mb->data == chunk.data;
      mean_bytes += mp.size();
      // Byte-plane rANS.
      t0 = Clock::now();
      KVSTASH_ASSIGN_OR_RETURN(auto bp, baselines::EncodeBytePlanePayload(chunk.view(), fingerprint, c.begin));
      t1 = Clock::now();
      auto bpb = baselines::DecodeBytePlanePayload(bp);
      t2 = Clock::now();
      bp_enc += Secs(t0, t1);
      bp_dec += Secs(t1, t2);
      bp_ok &= bpb.ok() && bpb->data == chunk.data;
      bp_bytes += bp.size();
      // zstd -19 on the raw bytes.
      std::vector<uint8_t> z(ZSTD_compressBound(chunk.data.size()));
      t0 = Clock::now();
      const size_t zn = ZSTD_compress(z.data(), z.size(), chunk.data.data(), chunk.data.size(), 19);
      t1 = Clock::now();
      z_enc += Secs(t0, t1);
      if (ZSTD_isError(zn)) return Status::Internal("zstd failed");
      std::vector<uint8_t> zb(chunk.data.size());
      z_ok &= ZSTD_decompress(zb.data(), zb.size(), z.data(), zn) == chunk.data.size() && zb == chunk.data;
      zstd_bytes += zn;
    }
    const double scalars = static_cast<double>(eval_chunks.size()) * o.chunk_tokens * L.ScalarsPerToken();
    const uint64_t tokens = eval_chunks.size() * o.chunk_tokens;
    out["rows"].push_back(Row("spec", dt, tokens, raw, spec_bytes, scalars, spec_ideal, spec_ok, enc_s, dec_s, cost));
    out["rows"].push_back(Row("spec-published", dt, tokens, raw, pub_bits / 8.0, scalars, pub_bits,
                              nlohmann::json(), 0, 0, nlohmann::json()));
    out["rows"].push_back(Row("per-channel", dt, tokens, raw, mean_bytes, scalars, 0, mean_ok, 0, 0, nlohmann::json()));
    out["rows"].push_back(Row("byte-plane", dt, tokens, raw, bp_bytes, scalars, 0, bp_ok, bp_enc, bp_dec, nlohmann::json()));
    out["rows"].push_back(Row("zstd-19", dt, tokens, raw, zstd_bytes, scalars, 0, z_ok, z_enc, 0, nlohmann::json()));
    nlohmann::json br;
    double kb = 0, vb = 0;
    for (uint32_t l = 0; l < L.n_layers; ++l) {
      const double per = static_cast<double>(eval_chunks.size()) * n;
      br["layers"].push_back({{"layer", l}, {"k_bits_per_scalar", 8 * layer_bytes[2 * l] / per},
                              {"v_bits_per_scalar", 8 * layer_bytes[2 * l + 1] / per}});
      kb += layer_bytes[2 * l];
      vb += layer_bytes[2 * l + 1];
    }
    br["k_bits_per_scalar"] = 16.0 * kb / scalars;  // K is half the scalars
    br["v_bits_per_scalar"] = 16.0 * vb / scalars;
    out["breakdown"][std::string(DTypeName(dt))] = br;
  }
  return out;
}

Status CalibrateSpec(const SpecBenchOptions& o) {
  if (o.artifact_dir.empty()) return Status::InvalidArgument("calibrate spec: no output folder");
  KVSTASH_ASSIGN_OR_RETURN(auto target, model::LoadModel(o.model_path));
  if (!target->tokenizer) return Status::InvalidArgument("calibrate spec: the model file has no tokenizer");
  const model::SpecPredictorOptions po = PredictorOptions(o);
  KVSTASH_ASSIGN_OR_RETURN(auto predictor, model::SpecPredictor::Create(*target, po));
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*target->tokenizer, model::CorpusSplit::kCalibration,
                                                          o.doc_tokens, o.cal_tokens));
  DocRunTimes times;
  KVSTASH_ASSIGN_OR_RETURN(auto docs, RunDocs(*target, nullptr, *predictor, corpus, &times));
  const auto refs = Chunks(docs, o.chunk_tokens);
  if (refs.empty()) return Status::InvalidArgument("calibrate spec: not enough text for one chunk");
  for (DType dt : o.dtypes) {
    const KvLayout L{target->config.n_layers, target->config.n_kv_heads, target->config.head_dim, dt};
    const std::vector<float> scales = dt == DType::kFP8E4M3 ? Fp8Scales(refs, L) : std::vector<float>();
    std::vector<KvChunk> cal;
    for (const ChunkRef& c : refs) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk k, model::ToKvChunk(c.doc->target, c.begin, c.end, dt, scales));
      cal.push_back(std::move(k));
    }
    KVSTASH_ASSIGN_OR_RETURN(auto art, Calibrate(L, cal, refs, *predictor, po.VariantName(), nullptr));
    KVSTASH_RETURN_IF_ERROR(WriteArtifact(art, o.artifact_dir, po.VariantName()));
  }
  return Status::Ok();
}


}  // namespace kvstash::bench
