#include "demo/demo.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "common/sha256.h"
#include "demo/demo_llama.h"
#include "demo/demo_report.h"
#include "demo/demo_runner.h"
#include "demo/demo_server.h"
#include "kvstash/prefix_codec.h"
#include "model/formats/model_loader.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::demo {
namespace {

int Fail(const std::string& what, const Status& s) { return demo::Fail("kvstash-demo", what, s); }

}  // namespace

int RunDemo(DemoOptions o) {
  if (o.engine != "llama.cpp" && o.engine != "reference") {
    std::cerr << "kvstash-demo: --engine must be llama.cpp or reference\n";
    return 2;
  }
  if (o.hybrid.enabled() && o.engine == "llama.cpp") {
    std::cerr << "kvstash-demo: --model-kind hybrid runs on the reference runtime: pass --engine reference\n";
    return 2;
  }
  if (o.engine == "llama.cpp") return RunLlamaDemo(o);
  if (o.hybrid.enabled()) {
    return RunHybridDemo(o.hybrid, {o.codecs, o.model_path, o.client, o.start_server, o.data_dir, o.port, o.http_port,
                                    o.keep_server, o.workload, o.gen_tokens, o.json, o.quiet,
                                    o.restore_policy});
  }
  const auto t_start = Clock::now();
  auto parsed = ParseDemoCodecs(o.codecs);
  if (!parsed.ok()) {
    std::cerr << "kvstash-demo: " << parsed.status().message() << "\n";
    return 2;
  }
  const auto& [kinds, want_spec, want_dckv] = *parsed;

  // Server: ours (spawned) or the given one.
  DemoServer server;
  auto client_u = StartServerAndConnect(o.start_server, o.data_dir, o.port, o.http_port, o.keep_server, &o.client, &server);
  if (!client_u.ok()) {
    std::cerr << "kvstash-demo: " << client_u.status().ToString() << "\n";
    return 1;
  }
  std::shared_ptr<Client> client(std::move(client_u).value());

  // Model, fingerprint, predictor, artifacts.
  auto t0 = Clock::now();
  auto model = model::LoadModel(o.model_path);
  if (!model.ok()) return Fail("loading " + o.model_path, model.status());
  if (!(*model)->tokenizer) return Fail("model", Status::InvalidArgument("the model file has no tokenizer"));
  auto fingerprint = Sha256File(o.model_path);
  if (!fingerprint.ok()) return Fail("fingerprint", fingerprint.status());
  std::shared_ptr<const model::SpecPredictor> predictor;
  if (want_spec) {
    model::SpecPredictorOptions po;
    po.threads = o.predictor_threads;
    auto p = model::SpecPredictor::Create(**model, po);
    if (!p.ok()) return Fail("spec predictor", p.status());
    predictor = std::move(p).value();
  }
  const double load_s = Secs(t0);
  auto artifacts = LoadOrCalibrateArtifacts(**model, *fingerprint, predictor.get(), want_spec, want_dckv, o.artifacts);
  if (!artifacts.ok()) return Fail("codec artifacts", artifacts.status());
  if (want_spec) {
    std::printf("spec artifact %s (%s)\n", artifacts->spec_path.c_str(),
                artifacts->spec_cached ? "cached" : "calibrated now");
  }
  if (want_dckv) {
    std::printf("dckv artifact %s (%s)\n", artifacts->dckv_path.c_str(),
                artifacts->dckv_cached ? "cached" : "calibrated now");
  }
  if (artifacts->calibration_s > 0) {
    std::printf("calibration: %llu tokens of the calibration text in %.1f s\n",
                static_cast<unsigned long long>(artifacts->calibration_tokens), artifacts->calibration_s);
  }

  auto workload = BuildDemoWorkload(*(*model)->tokenizer, o.workload);
  if (!workload.ok()) return Fail("workload", workload.status());
  uint64_t prompt_tokens = 0;
  for (const auto& r : workload->requests) prompt_tokens += workload->PromptTokens(r);
  std::printf("workload: %zu documents (%u tokens each) x %u questions = %zu requests, %llu prompt tokens, seed %llu\n",
              workload->documents.size(), o.workload.doc_tokens, o.workload.requests_per_doc,
              workload->requests.size(), static_cast<unsigned long long>(prompt_tokens),
              static_cast<unsigned long long>(o.workload.seed));
  std::fflush(stdout);

  DemoRunOptions ro;
  ro.gen_tokens = o.gen_tokens;
  // A fresh cache salt per run: entries of an earlier run (RocksDB persists) never hit.
  const std::string run_id = RandomHex(8);
  ro.verbose = !o.quiet;
  ro.restore_policy = o.restore_policy;
  auto reference = std::make_unique<DemoReference>();  // filled by the codec passes

  std::vector<DemoCodecRow> rows;
  for (PrefixCodecKind k : kinds) {
    PrefixCodecOptions co;
    co.kind = k;
    co.model_fingerprint = *fingerprint;
    co.tenant = o.client.tenant;
    co.cache_salt = "demo-" + run_id;
    auto codec = MakeDemoCodec(k, **model, predictor, *artifacts, co);
    if (!codec.ok()) return Fail(std::string("codec ") + PrefixCodecName(k), codec.status());
    auto row = RunDemoCodec(**model, *workload, reference.get(), std::move(codec).value(), client, ro);
    if (!row.ok()) return Fail(std::string("run ") + PrefixCodecName(k), row.status());
    rows.push_back(*row);
  }

  const auto acceptance = DemoAcceptance(rows);
  const double wall_s = Secs(t_start);
  std::printf("\n%s", DemoTable(rows).c_str());
  std::printf("\nacceptance: token hit rate > 50%%: %s; hit TTFT < miss TTFT: %s; no mismatched hit: %s\n",
              acceptance["token_hit_rate_over_50"].get<bool>() ? "yes" : "NO",
              acceptance["hit_ttft_below_miss"].get<bool>() ? "yes" : "NO",
              acceptance["no_mismatch"].get<bool>() ? "yes" : "NO");
  std::printf("demo wall time %.1f s (model load %.1f s, calibration %.1f s, reference answers %.1f s)\n", wall_s, load_s,
              artifacts->calibration_s, reference->wall_s);

  if (!o.json.empty()) {
    DemoRunFacts facts;
    facts.model_sha256 = ToHex(*fingerprint);
    facts.requests = workload->requests.size();
    facts.prompt_tokens = prompt_tokens;
    facts.calibration_s = artifacts->calibration_s;
    facts.reference_s = reference->wall_s;
    facts.wall_s = wall_s;
    facts.run_id = run_id;
    facts.predictor = predictor ? predictor->options().VariantName() : "";
    for (const auto& d : workload->documents) facts.sources.push_back(d.source);
    const Status w = WriteDemoJson(o, rows, acceptance, facts, {{"engine", "reference"}, {"kv_dtype", "bf16"}}, nlohmann::json::object());
    if (!w.ok()) return Fail("writing " + o.json, w);
  }
  FinishServer(o.start_server, o.keep_server, /*show_dashboard=*/true, &server);
  return acceptance["passed"].get<bool>() ? 0 : 1;
}

}  // namespace kvstash::demo
