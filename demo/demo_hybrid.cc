#include "demo/demo_hybrid.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

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

}  // namespace

int RunHybridDemo(const HybridDemoOptions& flags, DemoCommonArgs o) {
  const auto t_start = Clock::now();
  for (const auto& c : o.codecs) {
    if (c != "raw" && c != "spec" && c != "dckv") {
      std::cerr << "kvstash-demo --model-kind hybrid: codec '" << c
                << "' is not available for the hybrid model (raw, spec, dckv)\n";
      return 2;
    }
  }
  DemoServer server;
  auto client = StartServerAndConnect(o.start_server, o.data_dir, o.port, o.http_port, o.keep_server, &o.client, &server);
  if (!client.ok()) {
    std::cerr << "kvstash-demo: " << client.status().ToString() << "\n";
    return 1;
  }
  const std::shared_ptr<Client> shared_client = std::move(client).value();

  const std::string dir = flags.hybrid_model.empty() ? DefaultHybridModelDir() : flags.hybrid_model;
  auto loaded = hybrid::HybridModel::Load(dir);
  if (!loaded.ok()) return Fail("loading " + dir, loaded.status());
  const hybrid::HybridModel& model = *loaded;
  const hybrid::HybridConfig& cfg = model.config();
  auto tokenizer = model::LoadTokenizer(o.tokenizer_model, 0);
  if (!tokenizer.ok()) return Fail("tokenizer of " + o.tokenizer_model, tokenizer.status());
  auto workload = BuildDemoWorkload(**tokenizer, o.workload);
  if (!workload.ok()) return Fail("workload", workload.status());
  MapToVocab(&*workload, cfg.vocab_size);
  uint64_t prompt_tokens = 0;
  for (const auto& r : workload->requests) prompt_tokens += workload->PromptTokens(r);
  const KvLayout layout = hybrid::HybridKvLayout(cfg);
  auto empty_state = hybrid::ExportRecurrentState(cfg, hybrid::HybridState::Empty(cfg));
  if (!empty_state.ok()) return Fail("state", empty_state.status());
  std::printf("hybrid model %s: %u layers (%u attention, %u Gated DeltaNet), vocab %u; KV %llu B/token, state %llu B "
              "per boundary\n",
              dir.c_str(), cfg.num_layers(), cfg.num_attention_layers(),
              cfg.num_layers() - cfg.num_attention_layers(), cfg.vocab_size,
              static_cast<unsigned long long>(layout.DataBytes(1)),
              static_cast<unsigned long long>(empty_state->DataBytes()));
  std::printf("workload: %zu documents (%u tokens each) x %u questions = %zu requests, %llu prompt tokens, seed %llu "
              "(SmolLM2 token ids mod %u)\n",
              workload->documents.size(), o.workload.doc_tokens, o.workload.requests_per_doc,
              workload->requests.size(), static_cast<unsigned long long>(prompt_tokens),
              static_cast<unsigned long long>(o.workload.seed), cfg.vocab_size);
  std::fflush(stdout);

  HybridCodecs codecs;
  if (const Status st = MakeHybridCodecs(model, **tokenizer, flags, o.codecs, &codecs); !st.ok()) {
    return Fail(codecs.failed, st);
  }

  HybridDemoRunOptions ro;
  ro.gen_tokens = o.gen_tokens;
  ro.chunk_tokens = flags.chunk_tokens;
  ro.state_every = flags.state_every;
  ro.verbose = !o.quiet;
  ro.restore_policy = o.restore_policy;
  auto reference = RunHybridReference(model, *workload, ro);
  if (!reference.ok()) return Fail("reference pass", reference.status());
  std::printf("reference pass (full prefill of every prompt, exact states at the boundaries): %.1f s\n",
              reference->wall_s);
  std::fflush(stdout);

  const std::string run_id = RandomHex(8);
  std::vector<HybridDemoRow> rows;
  std::vector<DemoCodecRow> base_rows;
  for (const auto& c : o.codecs) {
    std::unique_ptr<HybridKvCoder> coder = c == "spec"
                                               ? MakeSpecHybridCoder(model, codecs.predictor, codecs.artifact)
                                           : c == "dckv" ? MakeDckvHybridCoder(model, codecs.dckv)
                                                         : MakeRawHybridCoder(model);
    auto codec = MakeHybridChunkCodec(
        model, std::move(coder),
        {flags.chunk_tokens, flags.state_every, "demo-hybrid-" + run_id + "-" + c, o.client.tenant});
    if (!codec.ok()) return Fail("codec " + c, codec.status());
    auto row = RunHybridCodec(model, *workload, *reference, std::move(codec).value(), shared_client, ro);
    if (!row.ok()) return Fail("run " + c, row.status());
    rows.push_back(*row);
    base_rows.push_back(row->base);
  }

  auto acceptance = DemoAcceptance(base_rows);
  const bool state_exact = StateExact(rows);
  acceptance["state_kv_continuation_exact_on_every_hit"] = state_exact;
  acceptance["passed"] = acceptance["passed"].get<bool>() && state_exact;
  const double wall_s = Secs(t_start);
  std::printf("\n%s", DemoTable(base_rows).c_str());
  PrintStateTable(rows);
  std::printf("\nacceptance: token hit rate > 50%%: %s; hit TTFT < miss TTFT: %s; every hit's state exact (and KV "
              "+ continuation, lossless codecs): %s\n",
              acceptance["token_hit_rate_over_50"].get<bool>() ? "yes" : "NO",
              acceptance["hit_ttft_below_miss"].get<bool>() ? "yes" : "NO", state_exact ? "yes" : "NO");
  std::printf("demo wall time %.1f s (reference pass %.1f s)\n", wall_s, reference->wall_s);

  if (!o.json.empty()) {
    nlohmann::json j;
    j["rows"] = nlohmann::json::array();
    for (const auto& r : rows) j["rows"].push_back(RowJson(r));
    j["acceptance"] = acceptance;
    j["setup"] = HybridSetupJson(o, flags, model, dir, codecs);
    j["setup"]["requests"] = workload->requests.size();
    j["setup"]["prompt_tokens"] = prompt_tokens;
    j["setup"]["state_bytes_per_boundary"] = empty_state->DataBytes();
    j["setup"]["reference_s"] = reference->wall_s;
    j["setup"]["wall_s"] = wall_s;
    j["setup"]["run_id"] = run_id;
    std::ofstream f(o.json);
    f << j.dump(2) << "\n";
    if (!f) return Fail("writing " + o.json, Status::IOError(o.json));
  }
  FinishServer(o.start_server, o.keep_server, /*show_dashboard=*/false, &server);
  return acceptance["passed"].get<bool>() ? 0 : 1;
}

}  // namespace kvstash::demo
