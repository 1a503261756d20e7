#include "demo/demo_hybrid.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/dckv/dckv_codec.h"
#include "common/default_paths.h"
#include "demo/demo_hybrid_codec.h"
#include "demo/demo_hybrid_runner.h"
#include "demo/demo_report.h"
#include "demo/demo_server.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_spec.h"

namespace kvstash::demo {
namespace {

int Fail(const std::string& what, const Status& s) {
  return demo::Fail("kvstash-demo --model-kind hybrid", what, s);
}


// Token ids modulo the model's vocabulary (see the header).
void MapToVocab(DemoWorkload* w, uint32_t vocab) {
  for (auto& d : w->documents) {
    for (auto& t : d.prefix) t %= vocab;
  }
  for (auto& r : w->requests) {
    for (auto& t : r.question_tokens) t %= vocab;
  }
}

nlohmann::json RowJson(const HybridDemoRow& r) {
  nlohmann::json j = DemoRowJson(r.base);
  j["kv_raw_bytes"] = r.kv_raw_bytes;
  j["kv_stored_bytes"] = r.kv_stored_bytes;
  j["state_raw_bytes"] = r.state_raw_bytes;
  j["state_stored_bytes"] = r.state_stored_bytes;
  j["state_ratio"] = r.state_stored_bytes ? double(r.state_raw_bytes) / r.state_stored_bytes : 0.0;
  j["states_put"] = r.states_put;
  j["hits_state_exact"] = r.state_checks;
  j["hits_kv_exact"] = r.kv_checks;
  j["hits_continuation_exact"] = r.logit_checks;
  return j;
}

// What the hybrid codecs need: spec's predictor and artifact, dckv's codec, calibrated
// on the calibration split (ids modulo the vocabulary).
struct HybridCodecs {
  std::shared_ptr<const hybrid::HybridPredictor> predictor;
  std::shared_ptr<const spec::SpecStateArtifact> artifact;
  std::shared_ptr<const dckv::DckvCodec> dckv;
  double calibration_s = 0;
  uint64_t cal_tokens = 0;
  std::string failed;  // on an error: the step that failed
};

// Calibrates what `codecs` need into *out, printing a line per codec. Errors: the
// corpus's and the calibrations' (out->failed names the step).
Status MakeHybridCodecs(const hybrid::HybridModel& model, const model::Tokenizer& tokenizer,
                        const HybridDemoOptions& flags, const std::vector<std::string>& codecs,
                        HybridCodecs* out) {
  const uint32_t vocab = model.config().vocab_size;
  const bool want_spec = std::count(codecs.begin(), codecs.end(), "spec") > 0;
  const bool want_dckv = std::count(codecs.begin(), codecs.end(), "dckv") > 0;
  std::vector<std::vector<uint32_t>> seqs;  // calibration text, ids modulo the vocabulary
  const auto fail = [out](const char* step, const Status& st) {
    out->failed = step;
    return st;
  };
  if (want_spec || want_dckv) {
    auto corpus = model::LoadCorpus(tokenizer, model::CorpusSplit::kCalibration, 1024, flags.cal_tokens);
    if (!corpus.ok()) return fail("calibration text", corpus.status());
    out->cal_tokens = corpus->TotalTokens();
    for (auto& d : corpus->documents) {
      for (auto& t : d.tokens) t %= vocab;
      seqs.push_back(std::move(d.tokens));
    }
  }
  if (want_dckv) {
    const auto t0 = Clock::now();
    auto a = CalibrateHybridDckv(model, seqs, flags.dckv_rate);
    if (!a.ok()) return fail("dckv calibration", a.status());
    auto codec = dckv::DckvCodec::Create(std::move(*a));
    if (!codec.ok()) return fail("dckv codec", codec.status());
    out->dckv = std::make_shared<dckv::DckvCodec>(std::move(*codec));
    const double s = Secs(t0);
    out->calibration_s += s;
    std::printf(
        "dckv: artifact (attention layers only, target %.1fx vs bf16) calibrated on %llu tokens of the "
        "calibration text in %.1f s\n",
        flags.dckv_rate, static_cast<unsigned long long>(out->cal_tokens), s);
  }
  if (want_spec) {
    const auto t0 = Clock::now();
    hybrid::HybridPredictorOptions po;
    po.group = flags.predictor_group;
    auto p = hybrid::HybridPredictor::Create(model, po);
    if (!p.ok()) return fail("predictor", p.status());
    auto predictor = std::make_shared<hybrid::HybridPredictor>(std::move(*p));
    out->predictor = predictor;
    auto a = hybrid::CalibrateHybridSpec(model, *predictor, seqs, 64);
    if (!a.ok()) return fail("spec calibration", a.status());
    out->artifact = std::make_shared<spec::SpecStateArtifact>(std::move(*a));
    out->calibration_s += Secs(t0);
    std::printf(
        "spec: predictor %s (weights digest %016llx), artifact calibrated on %llu tokens of the calibration "
        "text in %.1f s\n",
        po.Name().c_str(), static_cast<unsigned long long>(predictor->weights_digest()),
        static_cast<unsigned long long>(out->cal_tokens), Secs(t0));
  }
  return Status::Ok();
}

// Every row restored something (or declined every hit) and every hit's state was exact,
// and for lossless codecs its KV and continuation too.
bool StateExact(const std::vector<HybridDemoRow>& rows) {
  bool state_exact = !rows.empty();
  for (const auto& r : rows) {
    const bool lossy = r.base.top1_agreement >= 0;  // dckv: the KV and logits are not exact by design
    // A row whose every hit the cost model declined restored nothing to check.
    state_exact = state_exact && (r.base.hits > 0 || r.base.declined > 0) && r.state_checks == r.base.hits &&
                  (lossy || (r.kv_checks == r.base.hits && r.logit_checks == r.base.hits));
  }
  return state_exact;
}

// The state part of the report on stdout: one line per codec.
void PrintStateTable(const std::vector<HybridDemoRow>& rows) {
  std::printf("\nState part (fp32 recurrent state records at the boundaries):\n");
  std::printf("%-5s %10s %12s %14s %8s %10s %10s %14s\n", "codec", "states PUT", "state raw MB",
              "state stored MB", "ratio", "state ok", "KV ok", "continuation ok");
  for (const auto& r : rows) {
    std::printf("%-5s %10u %12.3f %14.3f %8.3f %7u/%-2u %7u/%-2u %11u/%-2u\n", r.base.codec.c_str(),
                r.states_put, r.state_raw_bytes / 1e6, r.state_stored_bytes / 1e6,
                r.state_stored_bytes ? double(r.state_raw_bytes) / r.state_stored_bytes : 0.0, r.state_checks,
                r.base.hits, r.kv_checks, r.base.hits, r.logit_checks, r.base.hits);
  }
}

// The "setup" object of the JSON report, but for the run's own facts (requests,
// prompt_tokens, state_bytes_per_boundary, reference_s, wall_s, run_id).
nlohmann::json HybridSetupJson(const DemoCommonArgs& o, const HybridDemoOptions& flags,
                               const hybrid::HybridModel& model, const std::string& dir,
                               const HybridCodecs& codecs) {
  return {{"model_kind", "hybrid"},
          {"model", dir},
          {"model_fingerprint", ToHex(model.fingerprint())},
          {"tokens", "SmolLM2 tokenizer ids of real text modulo the model vocabulary"},
          {"tokenizer_model", o.tokenizer_model},
          {"vocab_size", model.config().vocab_size},
          {"documents", o.workload.documents},
          {"doc_tokens", o.workload.doc_tokens},
          {"requests_per_doc", o.workload.requests_per_doc},
          {"gen_tokens", o.gen_tokens},
          {"seed", o.workload.seed},
          {"restore_policy", std::string(RestorePolicyName(o.restore_policy))},
          {"chunk_tokens", flags.chunk_tokens},
          {"state_every_chunks", flags.state_every},
          {"kv_dtype", "f32"},
          {"kv_bytes_per_token", hybrid::HybridKvLayout(model.config()).DataBytes(1)},
          {"calibration_s", codecs.calibration_s},
          {"calibration_tokens", codecs.cal_tokens},
          {"dckv_rate", flags.dckv_rate},
          {"predictor", codecs.predictor ? codecs.predictor->options().Name() : ""}};
}

// The hybrid runtime's demo (see the header).
class HybridDemo final : public DemoEngine {
 public:
  HybridDemo(const HybridDemoOptions& flags, DemoCommonArgs o) : flags_(flags), o_(std::move(o)) {}

  int Open() override {
    for (const auto& c : o_.codecs) {
      if (c != "raw" && c != "spec" && c != "dckv") {
        std::cerr << "kvstash-demo --model-kind hybrid: codec '" << c
                  << "' is not available for the hybrid model (raw, spec, dckv)\n";
        return 2;
      }
    }
    auto client = StartServerAndConnect(o_.start_server, o_.data_dir, o_.port, o_.http_port, o_.keep_server,
                                        &o_.client, &server_);
    if (!client.ok()) {
      std::cerr << "kvstash-demo: " << client.status().ToString() << "\n";
      return 1;
    }
    client_ = std::move(client).value();
    dir_ = flags_.hybrid_model.empty() ? DefaultHybridModelDir() : flags_.hybrid_model;
    auto loaded = hybrid::HybridModel::Load(dir_);
    if (!loaded.ok()) return Fail("loading " + dir_, loaded.status());
    model_.emplace(std::move(loaded).value());
    const hybrid::HybridConfig& cfg = model_->config();
    auto tokenizer = model::LoadTokenizer(o_.tokenizer_model, 0);
    if (!tokenizer.ok()) return Fail("tokenizer of " + o_.tokenizer_model, tokenizer.status());
    auto workload = BuildDemoWorkload(**tokenizer, o_.workload);
    if (!workload.ok()) return Fail("workload", workload.status());
    workload_ = std::move(workload).value();
    MapToVocab(&workload_, cfg.vocab_size);
    for (const auto& r : workload_.requests) prompt_tokens_ += workload_.PromptTokens(r);
    const KvLayout layout = hybrid::HybridKvLayout(cfg);
    auto empty_state = hybrid::ExportRecurrentState(cfg, hybrid::HybridState::Empty(cfg));
    if (!empty_state.ok()) return Fail("state", empty_state.status());
    state_bytes_ = empty_state->DataBytes();
    std::printf(
        "hybrid model %s: %u layers (%u attention, %u Gated DeltaNet), vocab %u; KV %llu B/token, state %llu "
        "B "
        "per boundary\n",
        dir_.c_str(), cfg.num_layers(), cfg.num_attention_layers(),
        cfg.num_layers() - cfg.num_attention_layers(), cfg.vocab_size,
        static_cast<unsigned long long>(layout.DataBytes(1)), static_cast<unsigned long long>(state_bytes_));
    std::printf(
        "workload: %zu documents (%u tokens each) x %u questions = %zu requests, %llu prompt tokens, seed "
        "%llu "
        "(SmolLM2 token ids mod %u)\n",
        workload_.documents.size(), o_.workload.doc_tokens, o_.workload.requests_per_doc,
        workload_.requests.size(), static_cast<unsigned long long>(prompt_tokens_),
        static_cast<unsigned long long>(o_.workload.seed), cfg.vocab_size);
    std::fflush(stdout);
    if (const Status st = MakeHybridCodecs(*model_, **tokenizer, flags_, o_.codecs, &codecs_); !st.ok()) {
      return Fail(codecs_.failed, st);
    }
    return OpenReference();
  }

  size_t codec_count() const override { return o_.codecs.size(); }

  int RunCodec(size_t k) override {
    const std::string& c = o_.codecs[k];
    const hybrid::HybridModel& model = *model_;
    std::unique_ptr<HybridKvCoder> coder =
        c == "spec"   ? MakeSpecHybridCoder(model, codecs_.predictor, codecs_.artifact)
        : c == "dckv" ? MakeDckvHybridCoder(model, codecs_.dckv)
                      : MakeRawHybridCoder(model);
    auto codec = MakeHybridChunkCodec(
        model, std::move(coder),
        {flags_.chunk_tokens, flags_.state_every, "demo-hybrid-" + run_id_ + "-" + c, o_.client.tenant});
    if (!codec.ok()) return Fail("codec " + c, codec.status());
    auto row = RunHybridCodec(model, workload_, reference_, std::move(codec).value(), client_, ro_);
    if (!row.ok()) return Fail("run " + c, row.status());
    rows_.push_back(*row);
    base_rows_.push_back(row->base);
    return 0;
  }

  int Close() override {
    auto acceptance = DemoAcceptance(base_rows_);
    const bool state_exact = StateExact(rows_);
    acceptance["state_kv_continuation_exact_on_every_hit"] = state_exact;
    acceptance["passed"] = acceptance["passed"].get<bool>() && state_exact;
    const double wall_s = Secs(t_start_);
    std::printf("\n%s", DemoTable(base_rows_).c_str());
    PrintStateTable(rows_);
    std::printf(
        "\nacceptance: token hit rate > 50%%: %s; hit TTFT < miss TTFT: %s; every hit's state exact (and KV "
        "+ continuation, lossless codecs): %s\n",
        acceptance["token_hit_rate_over_50"].get<bool>() ? "yes" : "NO",
        acceptance["hit_ttft_below_miss"].get<bool>() ? "yes" : "NO", state_exact ? "yes" : "NO");
    std::printf("demo wall time %.1f s (reference pass %.1f s)\n", wall_s, reference_.wall_s);
    if (!o_.json.empty()) {
      nlohmann::json j;
      j["rows"] = nlohmann::json::array();
      for (const auto& r : rows_) j["rows"].push_back(RowJson(r));
      j["acceptance"] = acceptance;
      j["setup"] = HybridSetupJson(o_, flags_, *model_, dir_, codecs_);
      j["setup"]["requests"] = workload_.requests.size();
      j["setup"]["prompt_tokens"] = prompt_tokens_;
      j["setup"]["state_bytes_per_boundary"] = state_bytes_;
      j["setup"]["reference_s"] = reference_.wall_s;
      j["setup"]["wall_s"] = wall_s;
      j["setup"]["run_id"] = run_id_;
      std::ofstream f(o_.json);
      f << j.dump(2) << "\n";
      if (!f) return Fail("writing " + o_.json, Status::IOError(o_.json));
    }
    FinishServer(o_.start_server, o_.keep_server, /*show_dashboard=*/false, &server_);
    return acceptance["passed"].get<bool>() ? 0 : 1;
  }

 private:
  // The pass options and the reference pass shared by the codecs.
  int OpenReference() {
    ro_.gen_tokens = o_.gen_tokens;
    ro_.chunk_tokens = flags_.chunk_tokens;
    ro_.state_every = flags_.state_every;
    ro_.verbose = !o_.quiet;
    ro_.restore_policy = o_.restore_policy;
    auto reference = RunHybridReference(*model_, workload_, ro_);
    if (!reference.ok()) return Fail("reference pass", reference.status());
    reference_ = std::move(reference).value();
    std::printf("reference pass (full prefill of every prompt, exact states at the boundaries): %.1f s\n",
                reference_.wall_s);
    std::fflush(stdout);
    return 0;
  }

  const HybridDemoOptions flags_;
  DemoCommonArgs o_;
  const Clock::time_point t_start_ = Clock::now();
  const std::string run_id_ = RandomHex(8);
  DemoServer server_;
  std::shared_ptr<Client> client_;
  std::string dir_;
  std::optional<hybrid::HybridModel> model_;
  DemoWorkload workload_;
  uint64_t prompt_tokens_ = 0, state_bytes_ = 0;
  HybridCodecs codecs_;
  HybridDemoRunOptions ro_;
  HybridDemoReference reference_;
  std::vector<HybridDemoRow> rows_;
  std::vector<DemoCodecRow> base_rows_;
};

}  // namespace

std::unique_ptr<DemoEngine> MakeHybridDemo(const HybridDemoOptions& flags, DemoCommonArgs args) {
  return std::make_unique<HybridDemo>(flags, std::move(args));
}

}  // namespace kvstash::demo
