#include "benchmarks/drivers/dckv_bench.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "codec/baselines/kvtc.h"
#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_output_weights.h"
#include "codec/dckv/dckv_trained.h"
#include "common/default_paths.h"
#include "common/file_bytes.h"
#include "common/logging.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/generate.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"

namespace kvstash::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

struct Calibrated {
  dckv::DckvBasis basis;
  dckv::DckvBasis kvtc_basis;        // plain PCA for the KVTC-like baseline (when run)
  // Output weights (dckv_calibration.h, DckvFitOptions::output_weight): per block from
  // the noise measurement, or per dimension from a sensitivity file; empty without.
  std::vector<double> output_weight;
  double fit_s = 0, sensitivity_s = 0;
  uint64_t rows = 0;
  std::vector<std::string> sources;  // one per calibration document
};

// n of `docs` spread evenly over the list (all when n >= docs.size()): a split's files
// are prose then code, so a sample from the whole list covers both.
std::vector<model::CorpusDocument> Spread(std::vector<model::CorpusDocument> docs, size_t n) {
  if (n >= docs.size()) return docs;
  std::vector<model::CorpusDocument> out;
  for (size_t i = 0; i < n; ++i) out.push_back(std::move(docs[i * docs.size() / n]));
  return out;
}

// log-softmax of one logits row, in double.
std::vector<double> LogSoftmax(const float* x, size_t n) {
  double mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  const double lse = mx + std::log(s);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

// Mean over rows of KL(p_a || p_b), logits [rows, vocab].
double MeanKl(const std::vector<float>& a, const std::vector<float>& b, uint32_t rows, uint32_t vocab) {
  double sum = 0;
  for (uint32_t t = 0; t < rows; ++t) {
    const auto la = LogSoftmax(a.data() + static_cast<size_t>(t) * vocab, vocab);
    const auto lb = LogSoftmax(b.data() + static_cast<size_t>(t) * vocab, vocab);
    for (uint32_t i = 0; i < vocab; ++i) sum += std::exp(la[i]) * (la[i] - lb[i]);
  }
  return sum / rows;
}

// Output sensitivity of every (layer, K/V, kv head) block (dckv_calibration.h,
// DckvFitOptions::output_weight), on the prompt cache `exact` of a calibration
// document and its next tokens `next`: Gaussian noise of standard deviation
// sigma_b = noise * (the block's RMS deviation from its mean) is added to block b at
// every position the codec codes (not the raw head or tail), the continuation is
// prefilled teacher-forced, and w_b = mean KL(exact || noisy) / sigma_b^2 (KL is
// quadratic in small perturbations, so w_b is the KL cost per unit squared error of a
// value in that block). Adds w_b to `weight`.
Status AddSensitivity(const model::Model& m, const model::KvCache& exact, const std::vector<uint32_t>& next,
                      const DckvBenchOptions& o, std::vector<double>* weight) {
  const auto& mc = m.config;
  const uint32_t P = exact.tokens, hd = mc.head_dim, H = mc.n_kv_heads;
  const uint32_t first = std::min(P, o.raw_head), last = P > o.raw_tail ? P - o.raw_tail : 0;
  if (last <= first) return Status::InvalidArgument("calibrate dckv: sensitivity prompt shorter than the raw positions");
  model::PrefillOptions po;
  po.logits = model::PrefillOptions::Logits::kAll;
  auto ref_cache = exact;
  KVSTASH_ASSIGN_OR_RETURN(auto ref, model::Prefill(m, next, &ref_cache, po));
  std::mt19937_64 rng(0x5eed);
  for (uint32_t l = 0; l < mc.n_layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      for (uint32_t h = 0; h < H; ++h) {
        const auto& src = kv == 0 ? exact.k[l] : exact.v[l];
        // RMS deviation of the block's values from their per-channel mean.
        double var = 0;
        for (uint32_t c = 0; c < hd; ++c) {
          double s1 = 0, s2 = 0;
          for (uint32_t t = first; t < last; ++t) {
            const double x = src[(static_cast<size_t>(t) * H + h) * hd + c];
            s1 += x;
            s2 += x * x;
          }
          const double n = last - first;
          var += std::max(0.0, s2 / n - (s1 / n) * (s1 / n)) / hd;
        }
        const double sigma = o.sensitivity_noise * std::sqrt(var);
        if (!(sigma > 0)) return Status::InvalidArgument("calibrate dckv: a KV block has no variance");
        auto cache = exact;
        auto& dst = kv == 0 ? cache.k[l] : cache.v[l];
        std::normal_distribution<float> noise(0.0f, static_cast<float>(sigma));
        for (uint32_t t = first; t < last; ++t) {
          for (uint32_t c = 0; c < hd; ++c) dst[(static_cast<size_t>(t) * H + h) * hd + c] += noise(rng);
        }
        KVSTASH_ASSIGN_OR_RETURN(auto pr, model::Prefill(m, next, &cache, po));
        const double kl = MeanKl(ref.logits, pr.logits, static_cast<uint32_t>(next.size()), mc.vocab_size);
        (*weight)[(l * 2 + kv) * H + h] += kl / (sigma * sigma);
      }
    }
  }
  return Status::Ok();
}

// Output weights summed per (layer, K/V, kv head) block (as measured by AddSensitivity).
std::vector<double> BlockSums(const std::vector<double>& w, const model::ModelConfig& mc) {
  const size_t blocks = 2ull * mc.n_layers * mc.n_kv_heads;
  if (w.size() == blocks || w.empty()) return w;
  std::vector<double> out(blocks, 0.0);
  for (size_t i = 0; i < w.size(); ++i) out[i / mc.head_dim] += w[i];
  return out;
}

// The calibration documents: ceil(cal_tokens / cal_doc_tokens) of the calibration
// split, spread evenly over it.
Result<model::Corpus> CalibrationCorpus(const model::Model& m, const DckvBenchOptions& o) {
  KVSTASH_ASSIGN_OR_RETURN(auto all, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kCalibration,
                                                       o.cal_doc_tokens, std::numeric_limits<uint64_t>::max()));
  model::Corpus corpus;
  corpus.documents = Spread(std::move(all.documents), (o.cal_tokens + o.cal_doc_tokens - 1) / o.cal_doc_tokens);
  return corpus;
}

// Runs after a calibration document's prefill: the document, its index in the corpus
// and its cache.
using DocumentHook = std::function<Status(const model::CorpusDocument&, size_t, const model::KvCache&)>;

// The calibration rows of `corpus` (see dckv_bench.h): K before RoPE and V of every
// position but each document's first raw_head, with token ids and document row counts
// when o.conditional (and the embedding table). `hook` (may be empty) runs per document;
// `sources` gets each used document's source.
Result<dckv::DckvRows> CalibrationRows(const model::Model& m, const DckvBenchOptions& o,
                                       const model::Corpus& corpus, const DocumentHook& hook,
                                       std::vector<std::string>* sources) {
  const auto& mc = m.config;
  const uint64_t hr = static_cast<uint64_t>(mc.n_kv_heads) * mc.head_dim;
  auto rows = dckv::DckvRows::ForShape(mc.n_layers, mc.n_kv_heads, mc.head_dim);
  if (o.conditional) {
    rows.embed = m.embed;
    rows.vocab = mc.vocab_size;
    rows.embed_dim = mc.hidden;
  }
  for (size_t doc_index = 0; doc_index < corpus.documents.size(); ++doc_index) {
    const auto& doc = corpus.documents[doc_index];
    if (doc.tokens.size() <= o.raw_head) continue;
    auto cache = model::KvCache::ForModel(mc);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    po.keep_pre_rope_k = true;
    KVSTASH_ASSIGN_OR_RETURN(auto pr, model::Prefill(m, doc.tokens, &cache, po));
    sources->push_back(doc.source);
    if (hook) KVSTASH_RETURN_IF_ERROR(hook(doc, doc_index, cache));
    const uint64_t skip = o.raw_head * hr;  // attention sinks are stored raw
    for (uint32_t l = 0; l < mc.n_layers; ++l) {
      rows.k[l].insert(rows.k[l].end(), pr.k_pre_rope[l].begin() + skip, pr.k_pre_rope[l].end());
      rows.v[l].insert(rows.v[l].end(), cache.v[l].begin() + skip, cache.v[l].end());
    }
    rows.rows += doc.tokens.size() - o.raw_head;
    if (o.conditional) {
      rows.tokens.insert(rows.tokens.end(), doc.tokens.begin() + o.raw_head, doc.tokens.end());
      rows.document_rows.push_back(doc.tokens.size() - o.raw_head);
    }
  }
  KVSTASH_LOG_INFO("calibrate dckv: {} rows from {} documents", rows.rows, corpus.documents.size());
  return rows;
}

Result<Calibrated> Calibrate(const model::Model& m, const DckvBenchOptions& o) {
  KVSTASH_ASSIGN_OR_RETURN(const model::Corpus corpus, CalibrationCorpus(m, o));
  Calibrated c;
  const bool measure = o.sensitivity_file.empty() && o.sensitivity_docs > 0;
  if (!o.sensitivity_file.empty()) {
    KVSTASH_ASSIGN_OR_RETURN(auto file, dckv::ReadOutputWeights(o.sensitivity_file));
    if (file.n_layers != m.config.n_layers || file.n_kv_heads != m.config.n_kv_heads ||
        file.head_dim != m.config.head_dim) {
      return Status::InvalidArgument("calibrate dckv: " + o.sensitivity_file +
                                     " was made for another model shape");
    }
    c.output_weight = std::move(file.weight);
  } else if (measure) {
    c.output_weight.assign(2ull * m.config.n_layers * m.config.n_kv_heads, 0.0);
  }
  uint32_t sensitivity_done = 0;
  double sensitivity_s = 0;
  // The sensitivity documents: full-length ones spread over the calibration documents.
  const DocumentHook sensitivity = [&](const model::CorpusDocument& doc, size_t doc_index,
                                       const model::KvCache& cache) -> Status {
    const size_t every =
        std::max<size_t>(1, corpus.documents.size() / std::max<uint32_t>(1, o.sensitivity_docs));
    if (measure && sensitivity_done < o.sensitivity_docs && doc.tokens.size() == o.cal_doc_tokens &&
        doc_index % every == 0) {
      const auto t0 = Clock::now();
      const uint32_t P = static_cast<uint32_t>(doc.tokens.size()) - o.sensitivity_tokens;
      KVSTASH_ASSIGN_OR_RETURN(auto prompt_cache, cache.Prefix(P));
      const std::vector<uint32_t> next(doc.tokens.begin() + P, doc.tokens.end());
      KVSTASH_RETURN_IF_ERROR(AddSensitivity(m, prompt_cache, next, o, &c.output_weight));
      ++sensitivity_done;
      sensitivity_s += Seconds(t0);
    }
    return Status::Ok();
  };
  KVSTASH_ASSIGN_OR_RETURN(auto rows, CalibrationRows(m, o, corpus, sensitivity, &c.sources));
  if (!o.sensitivity_file.empty()) {
    KVSTASH_LOG_INFO("calibrate dckv: output weights per dimension from {}", o.sensitivity_file);
  } else if (measure) {
    KVSTASH_LOG_INFO("calibrate dckv: output weights per block, measured on {} documents", sensitivity_done);
  } else {
    KVSTASH_LOG_INFO("calibrate dckv: no output weights (MSE allocation)");
  }
  if (measure && sensitivity_done == 0) {
    return Status::InvalidArgument("calibrate dckv: no calibration document long enough for the sensitivity measurement");
  }
  // Floor: sensitivity_floor x the mean weight (a block or dimension whose noise barely
  // moved the outputs keeps a finite, small weight rather than a noisy near-zero one).
  double mean_w = 0;
  for (double w : c.output_weight) mean_w += w / static_cast<double>(c.output_weight.size());
  for (double& w : c.output_weight) w = std::max(w, o.sensitivity_floor * mean_w);
  if (!c.output_weight.empty() && !(mean_w > 0)) return Status::Internal("calibrate dckv: zero output sensitivity");
  c.sensitivity_s = sensitivity_s;
  c.rows = rows.rows;
  const auto t0 = Clock::now();
  dckv::DckvFitOptions fo;
  fo.embed_rank = o.embed_rank;
  if (o.weighted_pca) fo.output_weight = c.output_weight;
  KVSTASH_ASSIGN_OR_RETURN(c.basis, dckv::FitDckvBasis(rows, o.group_layers, fo));
  if (o.run_kvtc) {  // the baseline's own plain PCA (KVTC allocates by reconstruction error)
    if (o.weighted_pca && !c.output_weight.empty()) {
      dckv::DckvRows plain = std::move(rows);
      plain.tokens.clear();
      plain.document_rows.clear();
      KVSTASH_ASSIGN_OR_RETURN(c.kvtc_basis, dckv::FitDckvBasis(plain, o.group_layers, dckv::DckvFitOptions{}));
      for (auto& g : c.kvtc_basis.groups) g.coeffs = {};
    } else {
      c.kvtc_basis = c.basis;
    }
  }
  c.fit_s = Seconds(t0);
  return c;
}

Result<dckv::DckvArtifact> ArtifactFor(const Calibrated& c, const model::Model& m, const DckvBenchOptions& o,
                                       double rate) {
  dckv::DckvRateOptions ro;
  ro.target_ratio = rate;
  ro.active_threshold = o.active_threshold;
  ro.rope_theta = m.config.rope_theta;
  ro.raw_head = o.raw_head;
  ro.raw_tail = o.raw_tail;
  ro.checkerboard = o.checkerboard;
  if (!o.weighted_pca) ro.output_weight = c.output_weight;
  return dckv::MakeDckvArtifact(c.basis, ro);
}

std::string ArtifactName(const DckvBenchOptions& o, double rate) {
  std::ostringstream s;
  s << "dckv-g" << o.group_layers << "-r" << rate << ".kvda";
  return s.str();
}

Status WriteArtifact(const dckv::DckvArtifact& a, const std::string& path) {
  const auto bytes = a.Serialize();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) return Status::IOError("cannot write " + path);
  return Status::Ok();
}

struct Prompt {
  std::string source;                  // corpus file
  std::vector<uint32_t> prompt, continuation;
  model::KvCache exact;                // fp32 cache of the prompt
  std::vector<float> logits;           // exact cache: [continuation, vocab]
  std::vector<uint32_t> greedy;        // exact cache: greedy tokens after the continuation
};

struct Quality {
  double kl_sum = 0, kl_max = 0, top1 = 0, greedy = 0;
  uint64_t positions = 0, prompts = 0;
};

// Scores `restored` (a cache of the prompt) against the exact cache's outputs.
Status Score(const model::Model& m, const Prompt& p, const model::KvCache& restored,
             const DckvBenchOptions& o, Quality* q) {
  const uint32_t vocab = m.config.vocab_size;
  auto cache = restored;
  model::PrefillOptions po;
  po.logits = model::PrefillOptions::Logits::kAll;
  KVSTASH_ASSIGN_OR_RETURN(auto pr, model::Prefill(m, p.continuation, &cache, po));
  for (uint32_t t = 0; t < p.continuation.size(); ++t) {
    const auto a = LogSoftmax(p.logits.data() + static_cast<size_t>(t) * vocab, vocab);
    const auto b = LogSoftmax(pr.logits.data() + static_cast<size_t>(t) * vocab, vocab);
    double kl = 0;
    size_t am = 0, bm = 0;
    for (uint32_t i = 0; i < vocab; ++i) {
      kl += std::exp(a[i]) * (a[i] - b[i]);
      if (a[i] > a[am]) am = i;
      if (b[i] > b[bm]) bm = i;
    }
    q->kl_sum += kl;
    q->kl_max = std::max(q->kl_max, kl);
    q->top1 += am == bm ? 1 : 0;
    ++q->positions;
  }
  auto gcache = restored;
  std::vector<uint32_t> full = p.prompt;
  full.insert(full.end(), p.continuation.begin(), p.continuation.end());
  model::GenerateOptions go;
  go.max_new_tokens = o.greedy_tokens;
  go.stop_at_eos = false;
  KVSTASH_ASSIGN_OR_RETURN(auto greedy, model::GenerateGreedy(m, full, &gcache, go));
  size_t same = 0;
  while (same < greedy.size() && same < p.greedy.size() && greedy[same] == p.greedy[same]) ++same;
  q->greedy += p.greedy.empty() ? 1.0 : static_cast<double>(same) / p.greedy.size();
  ++q->prompts;
  return Status::Ok();
}

nlohmann::json QualityJson(const Quality& q) {
  return {{"kl_mean", q.kl_sum / q.positions}, {"kl_max", q.kl_max},
          {"top1_agreement", q.top1 / q.positions}, {"greedy_match", q.greedy / q.prompts}};
}

Result<std::vector<Prompt>> LoadPrompts(const model::Model& m, const DckvBenchOptions& o) {
  const uint32_t need = o.prompt_tokens + o.continuation_tokens;
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kEvaluation, need,
                                                          std::numeric_limits<uint64_t>::max()));
  std::vector<model::CorpusDocument> full;
  for (auto& doc : corpus.documents) {
    if (doc.tokens.size() == need) full.push_back(std::move(doc));
  }
  std::vector<Prompt> out;
  for (const auto& doc : Spread(std::move(full), o.prompts)) {
    Prompt p;
    p.prompt.assign(doc.tokens.begin(), doc.tokens.begin() + o.prompt_tokens);
    p.continuation.assign(doc.tokens.begin() + o.prompt_tokens, doc.tokens.end());
    p.exact = model::KvCache::ForModel(m.config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    KVSTASH_RETURN_IF_ERROR(model::Prefill(m, p.prompt, &p.exact, po).status());
    auto cache = p.exact;
    po.logits = model::PrefillOptions::Logits::kAll;
    KVSTASH_ASSIGN_OR_RETURN(auto pr, model::Prefill(m, p.continuation, &cache, po));
    p.logits = std::move(pr.logits);
    auto gcache = p.exact;
    std::vector<uint32_t> full = p.prompt;
    full.insert(full.end(), p.continuation.begin(), p.continuation.end());
    model::GenerateOptions go;
    go.max_new_tokens = o.greedy_tokens;
    go.stop_at_eos = false;
    KVSTASH_ASSIGN_OR_RETURN(p.greedy, model::GenerateGreedy(m, full, &gcache, go));
    p.source = doc.source;
    out.push_back(std::move(p));
  }
  if (out.size() < o.prompts) {
    return Status::InvalidArgument("bench codec dckv: the evaluation corpus has too few long documents");
  }
  return out;
}

}  // namespace

void ApplyDefaultSensitivity(DckvBenchOptions* o, bool file_given, bool docs_given) {
  if (file_given || docs_given) return;
  std::error_code ec;
  if (!std::filesystem::equivalent(o->model_path, DefaultModelPath(), ec)) return;  // false on any error too
  const std::string file = DefaultDckvSensitivityFile();
  if (!std::filesystem::is_regular_file(file, ec)) {
    KVSTASH_LOG_WARN("calibrate dckv: {} is absent; measuring per-block output weights instead", file);
    return;
  }
  o->sensitivity_file = file;
}

Status CalibrateDckv(const DckvBenchOptions& o) {
  // The output folder is created before the (minutes-long) calibration, so a bad --out
  // fails at once.
  if (std::error_code ec; !std::filesystem::create_directories(o.artifact_dir, ec) && ec) {
    return Status::IOError("calibrate dckv: cannot create " + o.artifact_dir + ": " + ec.message());
  }
  if (!o.sensitivity_file.empty())
    KVSTASH_RETURN_IF_ERROR(dckv::ReadOutputWeights(o.sensitivity_file).status());
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(o.model_path));
  if (!m->tokenizer) return Status::InvalidArgument("calibrate dckv: the model file has no tokenizer");
  KVSTASH_ASSIGN_OR_RETURN(auto cal, Calibrate(*m, o));
  for (double rate : o.rates) {
    KVSTASH_ASSIGN_OR_RETURN(auto a, ArtifactFor(cal, *m, o, rate));
    const std::string path = (std::filesystem::path(o.artifact_dir) / ArtifactName(o, rate)).string();
    KVSTASH_RETURN_IF_ERROR(WriteArtifact(a, path));
    KVSTASH_LOG_INFO("calibrate dckv: wrote {} ({} active components)", path, a.ActiveComponents());
  }
  return Status::Ok();
}

namespace {

// Whether an artifact was made for a model of this config: KV shape, RoPE base and, when
// it conditions on tokens, the vocabulary.
bool FitsModel(const dckv::DckvArtifact& a, const model::ModelConfig& mc) {
  return a.n_layers == mc.n_layers && a.n_kv_heads == mc.n_kv_heads && a.head_dim == mc.head_dim &&
         a.rope_theta == mc.rope_theta && (a.conditioning.rank == 0 || a.conditioning.vocab == mc.vocab_size);
}

}  // namespace

Result<std::string> ImportTrainedDckv(const DckvBenchOptions& o, const std::string& trained_path,
                                      const std::string& base_path) {
  if (std::error_code ec; !std::filesystem::create_directories(o.artifact_dir, ec) && ec) {
    return Status::IOError("calibrate dckv: cannot create " + o.artifact_dir + ": " + ec.message());
  }
  KVSTASH_ASSIGN_OR_RETURN(const auto trained_bytes, ReadFileBytes(trained_path));
  KVSTASH_ASSIGN_OR_RETURN(const auto base_bytes, ReadFileBytes(base_path));
  auto imported = dckv::TrainedDckvTransform(trained_bytes, base_bytes);
  if (!imported.ok()) return imported.status().WithContext("calibrate dckv: " + trained_path);
  const dckv::DckvArtifact& t = imported->transform;
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(o.model_path));
  if (!m->tokenizer) return Status::InvalidArgument("calibrate dckv: the model file has no tokenizer");
  const auto& mc = m->config;
  if (!FitsModel(t, mc)) {
    return Status::Mismatch("calibrate dckv: the base artifact " + base_path +
                            " was calibrated for another model than " + o.model_path);
  }
  // The rows as calibration collects them, with the base artifact's raw head; token ids
  // when it conditions on tokens (its reduced embeddings are kept).
  DckvBenchOptions ro = o;
  ro.raw_head = t.raw_head;
  ro.conditional = t.conditioning.rank > 0;
  KVSTASH_ASSIGN_OR_RETURN(const model::Corpus corpus, CalibrationCorpus(*m, ro));
  std::vector<std::string> sources;
  KVSTASH_ASSIGN_OR_RETURN(const auto rows, CalibrationRows(*m, ro, corpus, {}, &sources));
  dckv::DckvRefitOptions fo;
  fo.checkerboard = o.checkerboard;
  dckv::DckvRefitReport report;
  KVSTASH_ASSIGN_OR_RETURN(auto a, dckv::RefitDckvArtifact(t, rows, fo, &report));
  const std::string path = (std::filesystem::path(o.artifact_dir) /
                            (std::filesystem::path(trained_path).stem().string() + ".kvda"))
                               .string();
  KVSTASH_RETURN_IF_ERROR(WriteArtifact(a, path));
  const auto bytes = a.Serialize();
  std::ostringstream s;
  s << "imported " << trained_path << " (format " << imported->metadata.at("format") << ", base " << base_path
    << ")\n"
    << "refitted on " << rows.rows << " calibration rows from " << sources.size() << " documents\n";
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    const auto& g = a.groups[gi];
    s << "group " << gi << ": layers " << g.first_layer << "-" << g.first_layer + g.layers - 1 << ", dims "
      << g.dims << ", n_active " << g.n_active() << ", encoder "
      << (g.encoder_basis.empty() ? "= decoder basis" : "own basis") << ", decoder net "
      << (g.decoder_net.empty() ? std::string("none") : "H=" + std::to_string(g.decoder_net.hidden))
      << ", encoder net "
      << (g.encoder_net.empty() ? std::string("none") : "H=" + std::to_string(g.encoder_net.hidden))
      << ", checkerboard " << (report.context[gi] ? "kept" : "off") << "\n";
  }
  const double bf16_bits = 16.0 * 2.0 * mc.n_layers * mc.n_kv_heads * mc.head_dim;
  s << "estimated " << report.estimated_bits << " bits per coded token (ratio ~"
    << (report.estimated_bits > 0 ? bf16_bits / report.estimated_bits : 0.0) << " vs bf16), "
    << a.tables->size() << " tables\n"
    << "wrote " << path << " (artifact version " << (bytes[4] | bytes[5] << 8) << ", " << bytes.size()
    << " bytes)\n";
  return s.str();
}

namespace {

// The codec of an artifact file given with --dckv-artifact, checked against the model and
// the raw-position options the bench's rows are measured with.
Result<dckv::DckvCodec> LoadArtifactFile(const std::string& path, const model::Model& m,
                                         const DckvBenchOptions& o) {
  KVSTASH_ASSIGN_OR_RETURN(auto bytes, ReadFileBytes(path));
  auto parsed = dckv::DckvArtifact::Parse(bytes);
  if (!parsed.ok())
    return Status::InvalidArgument("bench codec dckv: " + path + ": " + parsed.status().ToString());
  const dckv::DckvArtifact& a = *parsed;
  if (!FitsModel(a, m.config)) {
    return Status::InvalidArgument("bench codec dckv: " + path +
                                   " was made for another model (shape, RoPE base or vocabulary)");
  }
  if (a.raw_head != o.raw_head || a.raw_tail != o.raw_tail) {
    return Status::InvalidArgument("bench codec dckv: " + path + " keeps " + std::to_string(a.raw_head) +
                                   " + " + std::to_string(a.raw_tail) + " raw positions; pass --raw-head " +
                                   std::to_string(a.raw_head) + " --raw-tail " + std::to_string(a.raw_tail));
  }
  auto codec = dckv::DckvCodec::Create(std::move(parsed).value());
  if (!codec.ok())
    return Status::InvalidArgument("bench codec dckv: " + path + ": " + codec.status().ToString());
  return codec;
}

}  // namespace

Result<nlohmann::json> RunDckvBench(const DckvBenchOptions& o) {
  if (o.rates.empty()) return Status::InvalidArgument("bench codec dckv: no rate given");
  if (o.chunk_tokens == 0) return Status::InvalidArgument("bench codec dckv: chunk_tokens is 0");
  if (!o.sensitivity_file.empty())
    KVSTASH_RETURN_IF_ERROR(dckv::ReadOutputWeights(o.sensitivity_file).status());
  for (const std::string& path : o.artifact_files) KVSTASH_RETURN_IF_ERROR(ReadFileBytes(path).status());
  KVSTASH_ASSIGN_OR_RETURN(auto m, model::LoadModel(o.model_path));
  if (!m->tokenizer) return Status::InvalidArgument("bench codec dckv: the model file has no tokenizer");
  const auto& mc = m->config;
  std::vector<dckv::DckvCodec> file_codecs;  // checked before the long calibration
  for (const std::string& path : o.artifact_files) {
    KVSTASH_ASSIGN_OR_RETURN(dckv::DckvCodec codec, LoadArtifactFile(path, *m, o));
    file_codecs.push_back(std::move(codec));
  }
  const auto t_cal = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(auto cal, Calibrate(*m, o));
  const double cal_s = Seconds(t_cal);
  KVSTASH_ASSIGN_OR_RETURN(auto prompts, LoadPrompts(*m, o));
  const KvLayout bf16{mc.n_layers, mc.n_kv_heads, mc.head_dim, DType::kBF16};
  const double bf16_per_token = static_cast<double>(bf16.DataBytes(1));
  const Digest256 fingerprint{};  // one model per run

  nlohmann::json out;
  out["setup"] = {{"model", o.model_path}, {"calibration_rows", cal.rows}, {"calibration_s", cal_s},
                  {"pca_fit_s", cal.fit_s}, {"group_layers", o.group_layers},
                  {"prompts", o.prompts}, {"prompt_tokens", o.prompt_tokens},
                  {"continuation_tokens", o.continuation_tokens}, {"greedy_tokens", o.greedy_tokens},
                  {"chunk_tokens", o.chunk_tokens}, {"raw_head", o.raw_head}, {"raw_tail", o.raw_tail},
                  {"conditional", o.conditional}, {"checkerboard", o.checkerboard}, {"embed_rank", o.embed_rank},
                  {"scored_positions", static_cast<uint64_t>(o.prompts) * o.continuation_tokens},
                  {"calibration_documents", cal.sources},
                  {"sensitivity_docs", o.sensitivity_file.empty() ? o.sensitivity_docs : 0u},
                  {"sensitivity_tokens", o.sensitivity_tokens}, {"sensitivity_noise", o.sensitivity_noise},
                  {"sensitivity_s", cal.sensitivity_s}, {"weighted_pca", o.weighted_pca}, {"sensitivity_file", o.sensitivity_file},
                  {"sensitivity_floor", o.sensitivity_floor}, {"block_weight", BlockSums(cal.output_weight, mc)}};
  out["setup"]["evaluation_documents"] = nlohmann::json::array();
  for (const auto& p : prompts) out["setup"]["evaluation_documents"].push_back(p.source);
  out["rows"] = nlohmann::json::array();

  {  // Reference row: the plain bf16 cache.
    Quality q;
    for (const auto& p : prompts) {
      KVSTASH_ASSIGN_OR_RETURN(auto chunk, model::ToKvChunk(p.exact, 0, p.exact.tokens, DType::kBF16));
      KVSTASH_ASSIGN_OR_RETURN(auto restored, model::FromKvChunk(chunk.view()));
      KVSTASH_RETURN_IF_ERROR(Score(*m, p, restored, o, &q));
    }
    nlohmann::json r = {{"codec", "bf16"}, {"rate", 1.0}, {"tokens", o.prompt_tokens * prompts.size()},
                        {"bytes_per_token", bf16_per_token}, {"request_bytes_per_token", bf16_per_token},
                        {"ratio_vs_bf16", 1.0}, {"encode_mb_s", nullptr}, {"decode_mb_s", nullptr}};
    r.update(QualityJson(q));
    out["rows"].push_back(r);
  }

  // One rate-distortion row: every prompt's cache coded chunk by chunk, decoded,
  // restored and scored. `encode`/`decode` are the codec's.
  using EncodeFn = std::function<Result<std::vector<uint8_t>>(const KvChunk&, std::span<const uint32_t>,
                                                              uint32_t, uint32_t)>;
  using DecodeFn = std::function<Result<KvChunk>(std::span<const uint8_t>)>;
  auto measure = [&](const std::string& name, double rate, const EncodeFn& encode,
                     const DecodeFn& decode) -> Result<nlohmann::json> {
    Quality q;
    double enc_s = 0, dec_s = 0;
    uint64_t payload_bytes = 0, raw_bytes = 0, coded_tokens = 0, tokens = 0, chunk_bytes = 0;
    for (const auto& p : prompts) {
      model::KvCache restored = model::KvCache::ForModel(mc);
      const uint32_t P = p.exact.tokens;
      for (uint32_t b = 0; b < P; b += o.chunk_tokens) {
        const uint32_t e = std::min(P, b + o.chunk_tokens);
        KVSTASH_ASSIGN_OR_RETURN(auto chunk, model::ToKvChunk(p.exact, b, e, DType::kBF16));
        auto t0 = Clock::now();
        const std::span<const uint32_t> ids(p.prompt.data() + b, e - b);
        KVSTASH_ASSIGN_OR_RETURN(auto payload, encode(chunk, ids, b, P));
        enc_s += Seconds(t0);
        t0 = Clock::now();
        KVSTASH_ASSIGN_OR_RETURN(auto decoded, decode(payload));
        dec_s += Seconds(t0);
        // Raw rows: the same rule for both codecs (dckv_codec.h).
        const uint32_t head = o.raw_head > b ? std::min(e - b, o.raw_head - b) : 0;
        const uint32_t tail_start = P > o.raw_tail ? P - o.raw_tail : 0;
        const uint32_t first_tail = std::max(tail_start, b + head);
        const uint32_t tail = e > first_tail ? e - first_tail : 0;
        payload_bytes += payload.size();
        raw_bytes += static_cast<uint64_t>(head + tail) * static_cast<uint64_t>(bf16_per_token);
        coded_tokens += e - b - head - tail;
        tokens += e - b;
        chunk_bytes += chunk.data.size();
        KVSTASH_ASSIGN_OR_RETURN(auto part, model::FromKvChunk(decoded.view()));
        KVSTASH_RETURN_IF_ERROR(model::AppendKv(part, &restored));
      }
      KVSTASH_RETURN_IF_ERROR(Score(*m, p, restored, o, &q));
    }
    if (coded_tokens == 0) return Status::InvalidArgument("bench codec dckv: prompts shorter than the raw positions");
    const double bpt = static_cast<double>(payload_bytes - raw_bytes) / static_cast<double>(coded_tokens);
    nlohmann::json r = {{"codec", name}, {"rate", rate}, {"tokens", tokens},
                        {"bytes_per_token", bpt},
                        {"request_bytes_per_token", static_cast<double>(payload_bytes) / tokens},
                        {"ratio_vs_bf16", bf16_per_token / bpt},
                        {"encode_mb_s", chunk_bytes / enc_s / 1e6}, {"decode_mb_s", chunk_bytes / dec_s / 1e6}};
    r.update(QualityJson(q));
    KVSTASH_LOG_INFO("bench codec: {}", r.dump());
    return r;
  };

  for (double rate : o.rates) {
    if (o.run_dckv) {
      KVSTASH_ASSIGN_OR_RETURN(auto artifact, ArtifactFor(cal, *m, o, rate));
      const uint64_t active = artifact.ActiveComponents();
      if (!o.artifact_dir.empty()) {
        if (std::error_code ec; !std::filesystem::create_directories(o.artifact_dir, ec) && ec) {
          return Status::IOError("bench codec: cannot create " + o.artifact_dir + ": " + ec.message());
        }
        KVSTASH_RETURN_IF_ERROR(WriteArtifact(artifact, (std::filesystem::path(o.artifact_dir) / ArtifactName(o, rate)).string()));
      }
      KVSTASH_ASSIGN_OR_RETURN(auto codec, dckv::DckvCodec::Create(std::move(artifact)));
      KVSTASH_ASSIGN_OR_RETURN(
          auto r, measure("dckv", rate,
                          [&](const KvChunk& c, std::span<const uint32_t> ids, uint32_t b, uint32_t P) {
                            return codec.Encode(c.view(), ids, b, P, fingerprint);
                          },
                          [&](std::span<const uint8_t> pl) { return codec.Decode(pl, fingerprint); }));
      r["active_components"] = active;
      out["rows"].push_back(r);
    }
    if (o.run_kvtc) {
      KVSTASH_ASSIGN_OR_RETURN(auto codec, baselines::KvtcCodec::Create(cal.kvtc_basis, rate, mc.rope_theta,
                                                                       o.raw_head, o.raw_tail));
      KVSTASH_ASSIGN_OR_RETURN(
          auto r, measure("kvtc", rate,
                          [&](const KvChunk& c, std::span<const uint32_t>, uint32_t b, uint32_t P) {
                            return codec.Encode(c.view(), b, P, fingerprint);
                          },
                          [&](std::span<const uint8_t> pl) { return codec.Decode(pl, fingerprint); }));
      r["allocated_bits_per_token"] = codec.BitsPerToken();
      out["rows"].push_back(r);
    }
  }
  for (size_t fi = 0; fi < file_codecs.size(); ++fi) {
    const std::string& path = o.artifact_files[fi];
    const dckv::DckvCodec& codec = file_codecs[fi];
    const uint64_t active = codec.artifact().ActiveComponents();
    const double rate = codec.artifact().target_ratio;
    KVSTASH_ASSIGN_OR_RETURN(
        auto r, measure(
                    "dckv-file", rate,
                    [&](const KvChunk& c, std::span<const uint32_t> ids, uint32_t b, uint32_t P) {
                      return codec.Encode(c.view(), ids, b, P, fingerprint);
                    },
                    [&](std::span<const uint8_t> pl) { return codec.Decode(pl, fingerprint); }));
    r["active_components"] = active;
    r["artifact"] = path;
    r["decoder_nets"] = codec.artifact().HasDecoderCorrection();
    out["rows"].push_back(r);
  }
  return out;
}

}  // namespace kvstash::bench
