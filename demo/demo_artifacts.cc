#include "demo/demo_artifacts.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_chunk_rows.h"
#include "codec/dckv/dckv_output_weights.h"
#include "codec/spec/spec_calibration.h"
#include "common/checksum.h"
#include "common/kv_chunk_slice.h"
#include "common/logging.h"
#include "engines/llama_cpp/llama_state.h"
#include "model/corpus/text_corpus.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"

namespace kvstash::demo {
namespace {

// Output weights below this x their mean are raised to it (as `kvstash calibrate dckv`).
constexpr double kDckvWeightFloor = 0.01;

std::string Hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

Result<std::vector<uint8_t>> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

Status WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string tmp = path + ".part";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) return Status::IOError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot rename " + tmp + ": " + ec.message());
  return Status::Ok();
}

std::string CommonKeyText(const Digest256& fp, const DemoArtifactOptions& o) {
  std::ostringstream s;
  s << "kvstash-demo-artifact-v1|model=" << ToHex(fp) << "|cal_tokens=" << o.cal_tokens
    << "|cal_doc_tokens=" << o.cal_doc_tokens << "|chunk=256|files=";
  for (const auto& f : model::CorpusFiles(model::CorpusSplit::kCalibration)) s << f << ",";
  return s.str();
}

// One pass of the target model (and the predictor) over the calibration documents.
struct CalDoc {
  std::vector<uint32_t> tokens;
  KvChunk engine;  // the engine's KV of the tokens (options.engine_kv), when needed
  model::KvCache exact;
  std::vector<std::vector<float>> k_pre_rope;
  model::PredictorCache pred;
};

Result<spec::SpecArtifact> CalibrateSpec(const model::Model& m, const model::SpecPredictor& predictor,
                                         const std::vector<CalDoc>& docs, const DemoArtifactOptions& o) {
  const KvLayout L{m.config.n_layers, m.config.n_kv_heads, m.config.head_dim, o.kv_dtype};
  spec::CalibrationOptions co;
  co.contexts.dtype = L.dtype;
  co.predictor_digest = predictor.Digest();
  co.predictor_variant = predictor.options().VariantName();
  KVSTASH_ASSIGN_OR_RETURN(auto cb, spec::SpecCalibrator::Create(L, co));
  struct Piece {
    KvChunk chunk;
    spec::PredictedChunk pred;
  };
  std::vector<Piece> pieces;
  for (const CalDoc& d : docs) {
    for (uint32_t b = 0; b + 256 <= d.tokens.size(); b += 256) {
      KvChunk c;
      if (o.engine_kv) {
        KVSTASH_ASSIGN_OR_RETURN(c, SliceTokens(d.engine, b, 256));
      } else {
        KVSTASH_ASSIGN_OR_RETURN(c, model::ToKvChunk(d.exact, b, b + 256, L.dtype));
      }
      pieces.push_back({std::move(c), spec::PredictedSlice(d.pred, L, b, b + 256)});
    }
  }
  if (pieces.empty()) return Status::InvalidArgument("calibration: not one 256-token chunk of text");
  for (const Piece& p : pieces) KVSTASH_RETURN_IF_ERROR(cb.AddVariance(p.chunk.view(), p.pred));
  KVSTASH_RETURN_IF_ERROR(cb.FreezeSigma());
  for (const Piece& p : pieces) KVSTASH_RETURN_IF_ERROR(cb.AddHistogram(p.chunk.view(), p.pred));
  return cb.Build();
}

// sum (e - r)^2 and sum r^2 over n values.
void AddSquares(const float* e, const float* r, uint64_t n, double* diff2, double* ref2) {
  for (uint64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(e[i]) - r[i];
    *diff2 += d * d;
    *ref2 += static_cast<double>(r[i]) * r[i];
  }
}

Result<dckv::DckvArtifact> CalibrateDckv(const model::Model& m, const std::vector<CalDoc>& docs,
                                         const DemoArtifactOptions& o, DemoArtifacts* a) {
  const auto& mc = m.config;
  const uint64_t hr = static_cast<uint64_t>(mc.n_kv_heads) * mc.head_dim;
  auto rows = dckv::DckvRows::ForShape(mc.n_layers, mc.n_kv_heads, mc.head_dim);
  if (o.dckv_conditional) {
    rows.embed = m.embed;
    rows.vocab = mc.vocab_size;
    rows.embed_dim = mc.hidden;
  }
  double k_diff2 = 0, k_ref2 = 0, v_diff2 = 0, v_ref2 = 0;
  for (const CalDoc& d : docs) {
    if (d.tokens.size() <= o.dckv_raw_head) continue;
    const uint64_t skip = o.dckv_raw_head * hr;  // attention sinks are stored raw
    const uint64_t n = (d.tokens.size() - o.dckv_raw_head) * hr;
    if (o.dckv_engine_rows) {
      std::vector<size_t> first(mc.n_layers);
      for (uint32_t l = 0; l < mc.n_layers; ++l) first[l] = rows.k[l].size();
      KVSTASH_RETURN_IF_ERROR(
          dckv::AppendChunkRows(d.engine.view(), 0, o.dckv_raw_head, mc.rope_theta, &rows));
      for (uint32_t l = 0; l < mc.n_layers; ++l) {  // against our runtime's rows of the same tokens
        AddSquares(rows.k[l].data() + first[l], d.k_pre_rope[l].data() + skip, n, &k_diff2, &k_ref2);
        AddSquares(rows.v[l].data() + first[l], d.exact.v[l].data() + skip, n, &v_diff2, &v_ref2);
      }
    } else {
      for (uint32_t l = 0; l < mc.n_layers; ++l) {
        rows.k[l].insert(rows.k[l].end(), d.k_pre_rope[l].begin() + skip, d.k_pre_rope[l].end());
        rows.v[l].insert(rows.v[l].end(), d.exact.v[l].begin() + skip, d.exact.v[l].end());
      }
      rows.rows += d.tokens.size() - o.dckv_raw_head;
    }
    if (o.dckv_conditional) {
      rows.tokens.insert(rows.tokens.end(), d.tokens.begin() + o.dckv_raw_head, d.tokens.end());
      rows.document_rows.push_back(d.tokens.size() - o.dckv_raw_head);
    }
  }
  if (o.dckv_engine_rows && k_ref2 > 0 && v_ref2 > 0) {
    a->dckv_rows_rms_k = std::sqrt(k_diff2 / k_ref2);
    a->dckv_rows_rms_v = std::sqrt(v_diff2 / v_ref2);
    std::fprintf(stderr,
                 "[calibration] dckv rows from %s's KV: relative RMS against our runtime's rows of the same "
                 "tokens: K before RoPE %.4f, V %.4f\n",
                 o.engine_name.c_str(), a->dckv_rows_rms_k, a->dckv_rows_rms_v);
  }
  dckv::DckvFitOptions fo;
  if (!o.dckv_weights_file.empty()) {
    KVSTASH_ASSIGN_OR_RETURN(auto file, dckv::ReadOutputWeights(o.dckv_weights_file));
    if (file.n_layers != mc.n_layers || file.n_kv_heads != mc.n_kv_heads || file.head_dim != mc.head_dim) {
      return Status::InvalidArgument("demo artifacts: " + o.dckv_weights_file +
                                     " was made for another model shape");
    }
    fo.output_weight = std::move(file.weight);
    KVSTASH_RETURN_IF_ERROR(dckv::FloorOutputWeights(kDckvWeightFloor, &fo.output_weight));
  }
  KVSTASH_ASSIGN_OR_RETURN(auto basis, dckv::FitDckvBasis(rows, o.dckv_group_layers, fo));
  dckv::DckvRateOptions ro;
  ro.target_ratio = o.dckv_rate;
  ro.rope_theta = mc.rope_theta;
  ro.raw_head = o.dckv_raw_head;
  ro.raw_tail = o.dckv_raw_tail;
  ro.checkerboard = o.dckv_conditional;
  return dckv::MakeDckvArtifact(basis, ro);
}

}  // namespace

Result<std::string> DckvArtifactKeyText(const Digest256& fingerprint, const DemoArtifactOptions& o) {
  std::ostringstream key;
  key << CommonKeyText(fingerprint, o) << "|dckv|rate=" << o.dckv_rate << "|group=" << o.dckv_group_layers
      << "|head=" << o.dckv_raw_head << "|tail=" << o.dckv_raw_tail;
  // The reference demo's fitting keeps the v1 key above; anything else is named.
  if (o.dckv_engine_rows) key << "|rows=" << o.engine_name << "-" << DTypeName(o.kv_dtype) << "-unrope-v1";
  if (o.dckv_conditional) key << "|conditional=embed128-checkerboard";
  if (!o.dckv_weights_file.empty()) {
    auto bytes = ReadAll(o.dckv_weights_file);
    if (!bytes.ok())
      return Status::NotFound("demo artifacts: cannot read the dckv weights file " + o.dckv_weights_file);
    key << "|weights=" << Hex64(Xxh3_64(std::span<const uint8_t>(*bytes))) << "|floor=" << kDckvWeightFloor;
  }
  return key.str();
}

Result<DemoCodecs> ParseDemoCodecs(const std::vector<std::string>& names) {
  DemoCodecs c;
  for (const auto& name : names) {
    KVSTASH_ASSIGN_OR_RETURN(PrefixCodecKind k, ParsePrefixCodecKind(name));
    c.kinds.push_back(k);
    c.want_spec = c.want_spec || k == PrefixCodecKind::kSpec;
    c.want_dckv = c.want_dckv || k == PrefixCodecKind::kDckv;
  }
  return c;
}

Result<std::unique_ptr<PrefixCodec>> MakeDemoCodec(PrefixCodecKind kind, const model::Model& m,
                                                   std::shared_ptr<const model::SpecPredictor> predictor,
                                                   const DemoArtifacts& a, const PrefixCodecOptions& co) {
  switch (kind) {
    case PrefixCodecKind::kRaw: return PrefixCodec::CreateRaw(m, co);
    case PrefixCodecKind::kSpec: return PrefixCodec::CreateSpec(m, std::move(predictor), a.spec, co);
    case PrefixCodecKind::kDckv: return PrefixCodec::CreateDckv(m, a.dckv, co);
  }
  return Status::InvalidArgument("demo: unknown codec kind");
}

Result<DemoArtifacts> LoadOrCalibrateArtifacts(const model::Model& m, const Digest256& fingerprint,
                                               const model::SpecPredictor* predictor, bool want_spec,
                                               bool want_dckv, const DemoArtifactOptions& o) {
  if (want_spec && predictor == nullptr) return Status::InvalidArgument("demo artifacts: spec needs a predictor");
  DemoArtifacts a;
  a.want_spec = want_spec;
  a.want_dckv = want_dckv;
  const std::string common = CommonKeyText(fingerprint, o);
  std::error_code ec;
  std::filesystem::create_directories(o.cache_dir, ec);
  if (ec) return Status::IOError("cannot create " + o.cache_dir + ": " + ec.message());
  bool need_spec = false, need_dckv = false;
  if (want_spec) {
    std::string key = common + "|spec|predictor=" + Hex64(predictor->Digest()) + "|" +
                      predictor->options().VariantName();
    // The bf16 tables of the reference engine keep their v1 key (caches stay valid).
    if (o.kv_dtype != DType::kBF16 || o.engine_kv) {
      key += "|dtype=" + std::string(DTypeName(o.kv_dtype)) + "|engine=" + o.engine_name;
    }
    a.spec_path = o.cache_dir + "/spec-" + Hex64(Xxh3_64(std::string_view(key))) + ".kvsa";
    if (auto bytes = ReadAll(a.spec_path); bytes.ok()) {
      auto parsed = spec::SpecArtifact::Parse(*bytes);
      if (parsed.ok() && parsed->predictor_digest == predictor->Digest()) {
        a.spec = std::move(parsed).value();
        a.spec_cached = true;
      } else {
        KVSTASH_LOG_WARN("demo: cached {} is unusable ({}); recalibrating", a.spec_path,
                         parsed.ok() ? "another predictor" : parsed.status().ToString());
      }
    }
    need_spec = !a.spec_cached;
  }
  if (want_dckv) {
    if (o.dckv_engine_rows && !o.engine_kv) {
      return Status::InvalidArgument("demo artifacts: dckv_engine_rows needs the engine's KV (engine_kv)");
    }
    KVSTASH_ASSIGN_OR_RETURN(const std::string key, DckvArtifactKeyText(fingerprint, o));
    a.dckv_path = o.cache_dir + "/dckv-" + Hex64(Xxh3_64(std::string_view(key))) + ".kvda";
    if (auto bytes = ReadAll(a.dckv_path); bytes.ok()) {
      auto parsed = dckv::DckvArtifact::Parse(*bytes);
      if (parsed.ok()) {
        a.dckv = std::move(parsed).value();
        a.dckv_cached = true;
      } else {
        KVSTASH_LOG_WARN("demo: cached {} is unusable ({}); recalibrating", a.dckv_path,
                         parsed.status().ToString());
      }
    }
    need_dckv = !a.dckv_cached;
  }
  if (!need_spec && !need_dckv) return a;

  const auto t0 = std::chrono::steady_clock::now();
  auto lap = [&, t = std::chrono::steady_clock::now()](const char* what) mutable {
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[calibration] %s: %.1f s\n", what, std::chrono::duration<double>(now - t).count());
    t = now;
  };
  if (!m.tokenizer) return Status::InvalidArgument("demo: the model file has no tokenizer");
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kCalibration,
                                                          o.cal_doc_tokens, o.cal_tokens));
  std::vector<CalDoc> docs;
  for (const auto& cd : corpus.documents) {
    CalDoc d;
    d.tokens = cd.tokens;
    if (o.engine_kv && (need_spec || (need_dckv && o.dckv_engine_rows))) {
      const KvLayout L{m.config.n_layers, m.config.n_kv_heads, m.config.head_dim, o.kv_dtype};
      KVSTASH_ASSIGN_OR_RETURN(d.engine, o.engine_kv(d.tokens));
      if (!(d.engine.layout == L) || d.engine.tokens != d.tokens.size()) {
        return Status::InvalidArgument("calibration: the engine's KV is not " +
                                       std::to_string(d.tokens.size()) + " tokens of the model's layout in " +
                                       std::string(DTypeName(L.dtype)));
      }
    }
    d.exact = model::KvCache::ForModel(m.config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    po.keep_pre_rope_k = need_dckv;
    KVSTASH_ASSIGN_OR_RETURN(auto pr, model::Prefill(m, d.tokens, &d.exact, po));
    d.k_pre_rope = std::move(pr.k_pre_rope);
    if (need_spec) KVSTASH_RETURN_IF_ERROR(predictor->Run(d.tokens, &d.pred));
    a.calibration_tokens += d.tokens.size();
    docs.push_back(std::move(d));
  }
  lap("target model and predictor over the calibration text");
  if (need_spec) {
    KVSTASH_ASSIGN_OR_RETURN(a.spec, CalibrateSpec(m, *predictor, docs, o));
    lap("spec frequency tables");
    KVSTASH_RETURN_IF_ERROR(WriteAll(a.spec_path, a.spec.Serialize()));
  }
  if (need_dckv) {
    KVSTASH_ASSIGN_OR_RETURN(a.dckv, CalibrateDckv(m, docs, o, &a));
    lap("dckv basis and rate allocation");
    KVSTASH_RETURN_IF_ERROR(WriteAll(a.dckv_path, a.dckv.Serialize()));
  }
  a.calibration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

}  // namespace kvstash::demo
