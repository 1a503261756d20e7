// The tiny hybrid's rows of `kvstash-bench codec --codec spec --state`
// (benchmarks/drivers/spec_state_bench.h): spec on model/hybrid's Qwen3.5 fixture, part kv
// (the fp32 attention K/V of each `every`-token span) and part state (the Gated
// DeltaNet conv + delta states at each boundary), each against the same model-free
// baselines as the RWKV-7 rows. The fixture has RANDOM weights: its statistics say
// that the machinery works end to end, not what a trained hybrid would store.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>

#include "benchmarks/drivers/spec_state_bench.h"
#include "benchmarks/drivers/spec_state_rows.h"
#include "codec/spec/spec_state_codec.h"
#include "model/hybrid/hybrid_spec.h"
#include "model/rwkv7/rwkv_file.h"
#include "model/rwkv7/state_size.h"

namespace kvstash::bench {
namespace {


// The texts as byte tokens modulo the vocabulary (ASCII text is below 128, the tiny
// vocabulary), cut into documents of at most max_doc tokens (each run from the empty
// state: attention cost grows with the square of the length), at most max_tokens.
Result<std::vector<std::vector<uint32_t>>> LoadDocs(const std::vector<std::string>& paths, uint32_t vocab,
                                                    uint32_t max_doc, uint64_t max_tokens) {
  std::vector<std::vector<uint32_t>> docs;
  uint64_t total = 0;
  for (const std::string& p : paths) {
    auto bytes = ReadFileBytes(p);
    if (!bytes.ok()) return Status::IOError("cannot read text " + p);
    for (size_t b = 0; b < bytes->size() && total < max_tokens; b += max_doc) {
      const size_t e = std::min<size_t>({bytes->size(), b + max_doc, b + (max_tokens - total)});
      std::vector<uint32_t> d;
      for (size_t i = b; i < e; ++i) d.push_back((*bytes)[i] % vocab);
      total += d.size();
      docs.push_back(std::move(d));
    }
  }
  return docs;
}

// Per boundary of one run: the recurrent state, and the KV of the span before it.
struct Snaps {
  std::vector<RecurrentState> state, kv;
};

template <typename Step>
Status Snapshot(const hybrid::HybridConfig& c, const std::vector<uint32_t>& doc, uint32_t every, Step step,
                Snaps* out, double* seconds) {
  hybrid::HybridState s = hybrid::HybridState::Empty(c);
  for (uint32_t b = every; b <= doc.size(); b += every) {
    const double t0 = ThreadCpuSeconds();
    KVSTASH_RETURN_IF_ERROR(step(std::span(doc).subspan(b - every, every), &s));
    *seconds += ThreadCpuSeconds() - t0;
    KVSTASH_ASSIGN_OR_RETURN(out->state.emplace_back(), hybrid::ExportRecurrentState(c, s));
    KVSTASH_ASSIGN_OR_RETURN(out->kv.emplace_back(), hybrid::KvTensors(c, s, b - every, b));
  }
  return Status::Ok();
}


}  // namespace

Result<nlohmann::json> RunHybridSpecStateBench(const HybridStateBenchOptions& o) {
  if (o.every == 0 || o.max_doc_tokens < o.every) {
    return Status::InvalidArgument("hybrid state bench: every must be >= 1 and <= max_doc_tokens");
  }
  KVSTASH_ASSIGN_OR_RETURN(hybrid::HybridModel model, hybrid::HybridModel::Load(o.model_dir));
  const hybrid::HybridConfig& c = model.config();
  KVSTASH_ASSIGN_OR_RETURN(auto cal_docs, LoadDocs(o.cal_texts, c.vocab_size, o.max_doc_tokens, o.max_cal_tokens));
  KVSTASH_ASSIGN_OR_RETURN(auto eval_docs, LoadDocs(o.eval_texts, c.vocab_size, o.max_doc_tokens, o.max_eval_tokens));
  auto exact_step = [&](std::span<const uint32_t> t, hybrid::HybridState* s) { return model.EvalSequence(t, s, {}); };
  Snaps cal_exact, eval_exact;
  double cal_s = 0, eval_s = 0;
  uint64_t eval_tokens = 0;
  for (const auto& d : cal_docs) KVSTASH_RETURN_IF_ERROR(Snapshot(c, d, o.every, exact_step, &cal_exact, &cal_s));
  for (const auto& d : eval_docs) {
    KVSTASH_RETURN_IF_ERROR(Snapshot(c, d, o.every, exact_step, &eval_exact, &eval_s));
    eval_tokens += d.size() - d.size() % o.every;
  }
  if (cal_exact.state.empty() || eval_exact.state.empty()) {
    return Status::InvalidArgument("hybrid state bench: texts shorter than one boundary interval");
  }

  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, uint64_t> baseline;  // by part
  for (const std::string part : {"state", "kv"}) {
    const auto& eval = part == "state" ? eval_exact.state : eval_exact.kv;
    uint64_t zstd = 0, shuf = 0, scalars = 0;
    double bplane = 0;
    for (const RecurrentState& s : eval) {
      KVSTASH_ASSIGN_OR_RETURN(auto parts, rwkv7::MeasureStateParts(s, o.zstd_level));
      zstd += parts.back().zstd_bytes;
      shuf += parts.back().zstd_shuffled_bytes;
      bplane += parts.back().byteplane_bytes;
      scalars += parts.back().scalars;
    }
    const auto bp = static_cast<uint64_t>(std::ceil(bplane));
    baseline[part] = std::min({zstd, shuf, bp});
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, uint64_t>>{
             {"zstd-" + std::to_string(o.zstd_level), zstd},
             {"zstd-" + std::to_string(o.zstd_level) + "-shuffled", shuf},
             {"byte-plane-ideal", bp}}) {
      nlohmann::json r = StateRow("tiny-qwen35-random", part, name, eval_tokens, eval.size(), scalars, bytes);
      r["ratio_vs_baseline"] = static_cast<double>(bytes) / static_cast<double>(baseline[part]);
      rows.push_back(r);
    }
  }

  for (int group : o.predictor_groups) {
    hybrid::HybridPredictorOptions po;
    po.group = group;
    KVSTASH_ASSIGN_OR_RETURN(hybrid::HybridPredictor pred, hybrid::HybridPredictor::Create(model, po));
    auto pred_step = [&](std::span<const uint32_t> t, hybrid::HybridState* s) { return pred.Eval(t, s); };
    Snaps cal_pred, eval_pred;
    double pcal_s = 0, peval_s = 0;
    for (const auto& d : cal_docs) KVSTASH_RETURN_IF_ERROR(Snapshot(c, d, o.every, pred_step, &cal_pred, &pcal_s));
    for (const auto& d : eval_docs) KVSTASH_RETURN_IF_ERROR(Snapshot(c, d, o.every, pred_step, &eval_pred, &peval_s));
    std::vector<spec::StateCalibrationPair> pairs;
    for (size_t i = 0; i < cal_exact.state.size(); ++i) {
      pairs.push_back({&cal_exact.state[i], &cal_pred.state[i]});
      pairs.push_back({&cal_exact.kv[i], &cal_pred.kv[i]});
    }
    KVSTASH_ASSIGN_OR_RETURN(spec::SpecStateArtifact art, spec::CalibrateSpecState(pairs));
    for (const std::string part : {"state", "kv"}) {
      const auto& ex = part == "state" ? eval_exact.state : eval_exact.kv;
      const auto& pr = part == "state" ? eval_pred.state : eval_pred.kv;
      KVSTASH_ASSIGN_OR_RETURN(SpecStateTotals t, CodeSpecStates(art, ex, pr, "hybrid spec " + part));
      nlohmann::json r = StateRow("tiny-qwen35-random", part, "spec/" + po.Name(), eval_tokens, ex.size(),
                                  t.scalars, t.stored_bytes);
      AddSpecStateFields(t, t.scalars, baseline[part], po.Name(), peval_s / eval_s, art.Serialize().size(), &r);
      rows.push_back(r);
    }
  }
  nlohmann::json out;
  out["model"] = o.model_dir;
  out["model_fingerprint"] = ToHex(model.fingerprint());
  out["weights"] = "random (transformers initialisation): not representative of a trained hybrid";
  out["tokens"] = "text bytes modulo the vocabulary";
  out["cal_texts"] = o.cal_texts;
  out["eval_texts"] = o.eval_texts;
  out["max_doc_tokens"] = o.max_doc_tokens;
  out["boundary_every_tokens"] = o.every;
  out["calibration_boundaries"] = cal_exact.state.size();
  out["baseline_bytes"] = baseline;
  out["exact_forward_tokens_per_s"] = static_cast<double>(eval_tokens) / eval_s;
  out["rows"] = rows;
  return out;
}

}  // namespace kvstash::bench
