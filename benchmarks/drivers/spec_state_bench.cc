#include "benchmarks/drivers/spec_state_bench.h"
#include "benchmarks/drivers/spec_state_rows.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <map>

#include "codec/spec/spec_state_artifact.h"
#include "codec/spec/spec_state_codec.h"
#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv7_predictor.h"
#include "model/rwkv7/rwkv_file.h"
#include "model/rwkv7/state_size.h"

namespace kvstash::bench {
namespace {

using rwkv7::Rwkv7State;

// Timings are this thread's CPU time (ThreadCpuSeconds), so that a loaded machine
// (other processes taking the cores) does not distort the ratios between the steps.

struct Doc {
  std::string path;
  std::vector<uint32_t> tokens;
};

// Runs `step` (the reference model or a predictor) over `doc`, exporting the state at
// every multiple of `every` tokens. Adds the run time to *seconds.
template <typename Step>
Result<std::vector<RecurrentState>> Snapshots(const rwkv7::Rwkv7Config& cfg, const Doc& doc,
                                              uint32_t every, Step step, double* seconds) {
  std::vector<RecurrentState> out;
  Rwkv7State state = Rwkv7State::Zeros(cfg);
  for (size_t b = every; b <= doc.tokens.size(); b += every) {
    const double t0 = ThreadCpuSeconds();
    KVSTASH_RETURN_IF_ERROR(step(std::span<const uint32_t>(doc.tokens).subspan(b - every, every), &state));
    *seconds += ThreadCpuSeconds() - t0;
    KVSTASH_ASSIGN_OR_RETURN(RecurrentState s, rwkv7::ExportState(cfg, state));
    out.push_back(std::move(s));
  }
  return out;
}

Result<rwkv7::Rwkv7PredictorOptions> ParseVariant(const std::string& name) {
  rwkv7::Rwkv7PredictorOptions o;
  if (name == "bf16") {
    o.format = rwkv7::Rwkv7WeightFormat::kBf16;
  } else if (name == "fp16") {
    o.format = rwkv7::Rwkv7WeightFormat::kFp16;
  } else if (name == "fp32") {
    o.format = rwkv7::Rwkv7WeightFormat::kFp32;
  } else if (name.rfind("int8-g", 0) == 0) {
    char* end = nullptr;
    const long g = std::strtol(name.c_str() + 6, &end, 10);
    if (*end != '\0' || g < 1 || g > 4096) {
      return Status::InvalidArgument("predictor variant '" + name + "': group must be 1..4096");
    }
    o.format = rwkv7::Rwkv7WeightFormat::kInt8;
    o.group = static_cast<int>(g);
  } else {
    return Status::InvalidArgument("predictor variant '" + name +
                                   "' is not int8-gN, bf16, fp16 or fp32");
  }
  return o;
}


}  // namespace

Result<nlohmann::json> RunSpecStateBench(const SpecStateBenchOptions& o) {
  if (o.every == 0) return Status::InvalidArgument("--state-every must be >= 1");
  std::vector<rwkv7::Rwkv7PredictorOptions> variants;
  for (const std::string& name : o.predictors) {
    KVSTASH_ASSIGN_OR_RETURN(rwkv7::Rwkv7PredictorOptions po, ParseVariant(name));
    variants.push_back(po);
  }
  const std::string model_path = o.model_path.empty() ? DefaultRwkv7ModelPath() : o.model_path;
  KVSTASH_ASSIGN_OR_RETURN(rwkv7::Rwkv7Model model, rwkv7::Rwkv7Model::Load(model_path));
  const rwkv7::Rwkv7Config& cfg = model.config();
  if (cfg.n_vocab != 256) return Status::InvalidArgument("the texts are fed as bytes: need n_vocab 256");
  auto load_docs = [](const std::vector<std::string>& paths) -> Result<std::vector<Doc>> {
    std::vector<Doc> docs;
    for (const std::string& p : paths) {
      auto bytes = ReadFileBytes(p);
      if (!bytes.ok()) return Status::IOError("cannot read text " + p);
      docs.push_back({p, std::vector<uint32_t>(bytes->begin(), bytes->end())});
    }
    return docs;
  };
  KVSTASH_ASSIGN_OR_RETURN(std::vector<Doc> cal_docs, load_docs(o.cal_texts));
  KVSTASH_ASSIGN_OR_RETURN(std::vector<Doc> eval_docs, load_docs(o.eval_texts));

  // The engine's exact states.
  auto exact_step = [&](std::span<const uint32_t> t, Rwkv7State* s) {
    return model.EvalSequence(t, s, {});
  };
  double exact_seconds = 0.0;
  std::vector<RecurrentState> cal_exact, eval_exact;
  uint64_t eval_tokens = 0;
  for (const Doc& d : cal_docs) {
    KVSTASH_ASSIGN_OR_RETURN(auto s, Snapshots(cfg, d, o.every, exact_step, &exact_seconds));
    for (auto& x : s) cal_exact.push_back(std::move(x));
  }
  double eval_exact_seconds = 0.0;
  for (const Doc& d : eval_docs) {
    KVSTASH_ASSIGN_OR_RETURN(auto s, Snapshots(cfg, d, o.every, exact_step, &eval_exact_seconds));
    eval_tokens += d.tokens.size() - d.tokens.size() % o.every;
    for (auto& x : s) eval_exact.push_back(std::move(x));
  }
  if (cal_exact.empty() || eval_exact.empty()) {
    return Status::InvalidArgument("texts shorter than one boundary interval");
  }
  const uint64_t per_state = cfg.StateScalars();
  const uint64_t scalars = per_state * eval_exact.size();

  // Model-free baselines on the evaluation states.
  uint64_t zstd = 0, zstd_shuf = 0;
  double bplane = 0.0;
  for (const RecurrentState& s : eval_exact) {
    KVSTASH_ASSIGN_OR_RETURN(auto parts, rwkv7::MeasureStateParts(s, o.zstd_level));
    const rwkv7::StatePartSize& all = parts.back();
    zstd += all.zstd_bytes;
    zstd_shuf += all.zstd_shuffled_bytes;
    bplane += all.byteplane_bytes;
  }
  const auto bplane_bytes = static_cast<uint64_t>(std::ceil(bplane));
  const uint64_t baseline = std::min({zstd, zstd_shuf, bplane_bytes});
  nlohmann::json rows = nlohmann::json::array();
  auto add_baseline = [&](const std::string& name, uint64_t bytes) {
    nlohmann::json r = StateRow("rwkv7", "state", name, eval_tokens, eval_exact.size(), scalars, bytes);
    r["ratio_vs_baseline"] = static_cast<double>(bytes) / static_cast<double>(baseline);
    rows.push_back(r);
  };
  add_baseline("zstd-" + std::to_string(o.zstd_level), zstd);
  add_baseline("zstd-" + std::to_string(o.zstd_level) + "-shuffled", zstd_shuf);
  add_baseline("byte-plane-ideal", bplane_bytes);

  for (const rwkv7::Rwkv7PredictorOptions& po : variants) {
    const std::string name = po.Name();
    KVSTASH_ASSIGN_OR_RETURN(rwkv7::Rwkv7Predictor pred, rwkv7::Rwkv7Predictor::Create(model, po));
    auto pred_step = [&](std::span<const uint32_t> t, Rwkv7State* s) { return pred.Eval(t, s); };
    double cal_pred_seconds = 0.0, eval_pred_seconds = 0.0;
    std::vector<RecurrentState> cal_pred, eval_pred;
    for (const Doc& d : cal_docs) {
      KVSTASH_ASSIGN_OR_RETURN(auto s, Snapshots(cfg, d, o.every, pred_step, &cal_pred_seconds));
      for (auto& x : s) cal_pred.push_back(std::move(x));
    }
    for (const Doc& d : eval_docs) {
      KVSTASH_ASSIGN_OR_RETURN(auto s, Snapshots(cfg, d, o.every, pred_step, &eval_pred_seconds));
      for (auto& x : s) eval_pred.push_back(std::move(x));
    }
    std::vector<spec::StateCalibrationPair> pairs;
    for (size_t i = 0; i < cal_exact.size(); ++i) pairs.push_back({&cal_exact[i], &cal_pred[i]});
    KVSTASH_ASSIGN_OR_RETURN(spec::SpecStateArtifact art, spec::CalibrateSpecState(pairs));

    KVSTASH_ASSIGN_OR_RETURN(SpecStateTotals t,
                             CodeSpecStates(art, eval_exact, eval_pred, "spec state (" + name + ")"));
    nlohmann::json r = StateRow("rwkv7", "state", "spec/" + po.Name(), eval_tokens, eval_exact.size(), scalars,
                                t.stored_bytes);
    AddSpecStateFields(t, scalars, baseline, po.Name(), eval_pred_seconds / eval_exact_seconds,
                       art.Serialize().size(), &r);
    r["predictor_weight_bytes"] = pred.weight_bytes();
    rows.push_back(r);
  }

  nlohmann::json out;
  out["bench"] = "codec";
  out["part"] = "state";
  out["model"] = model_path;
  out["model_fingerprint"] = ToHex(model.fingerprint());
  out["cal_texts"] = o.cal_texts;
  out["eval_texts"] = o.eval_texts;
  out["boundary_every_tokens"] = o.every;
  out["calibration_states"] = cal_exact.size();
  out["scalars_per_state"] = per_state;
  out["zstd_level"] = o.zstd_level;
  out["timer"] = "thread CPU time (single-threaded run)";
  out["baseline"] = "min(zstd, zstd shuffled, byte-plane ideal)";
  out["baseline_bytes"] = baseline;
  out["exact_forward_tokens_per_s"] = static_cast<double>(eval_tokens) / eval_exact_seconds;
  if (o.hybrid) {
    HybridStateBenchOptions ho;
    ho.model_dir = std::string(KVSTASH_SOURCE_DIR) + "/tests/model/hybrid/data/tiny_qwen35";
    ho.cal_texts = o.cal_texts;
    ho.eval_texts = o.eval_texts;
    ho.every = o.every;
    ho.zstd_level = o.zstd_level;
    KVSTASH_ASSIGN_OR_RETURN(nlohmann::json h, RunHybridSpecStateBench(ho));
    for (const auto& r : h["rows"]) rows.push_back(r);
    h.erase("rows");
    out["hybrid"] = h;
  }
  out["rows"] = rows;
  return out;
}

}  // namespace kvstash::bench
