#include "demo/demo_setup.h"

#include <cstdio>
#include <iostream>
#include <utility>

#include "demo/demo_runner.h"
#include "model/formats/model_loader.h"

namespace kvstash::demo {
namespace {

int Fail(const std::string& what, const Status& s) { return demo::Fail("kvstash-demo", what, s); }

}  // namespace

int OpenDemo(const DemoOptions& o, ClientOptions* client_options, DemoServer* server, DemoSetup* out) {
  auto parsed = ParseDemoCodecs(o.codecs);
  if (!parsed.ok()) {
    std::cerr << "kvstash-demo: " << parsed.status().message() << "\n";
    return 2;
  }
  out->codecs = std::move(parsed).value();
  // Server: ours (spawned) or the given one.
  auto client = StartServerAndConnect(o.start_server, o.data_dir, o.port, o.http_port, o.keep_server,
                                      client_options, server);
  if (!client.ok()) {
    std::cerr << "kvstash-demo: " << client.status().ToString() << "\n";
    return 1;
  }
  out->client = std::move(client).value();
  const auto t0 = Clock::now();
  auto model = model::LoadModel(o.model_path);
  if (!model.ok()) return Fail("loading " + o.model_path, model.status());
  if (!(*model)->tokenizer) return Fail("model", Status::InvalidArgument("the model file has no tokenizer"));
  out->model = std::move(model).value();
  auto fingerprint = Sha256File(o.model_path);
  if (!fingerprint.ok()) return Fail("fingerprint", fingerprint.status());
  out->fingerprint = *fingerprint;
  out->load_s = Secs(t0);
  return 0;
}

void PrintArtifacts(const DemoArtifacts& a, const std::string& spec_note) {
  if (a.want_spec) {
    std::printf("spec artifact %s (%s%s)\n", a.spec_path.c_str(), a.spec_cached ? "cached" : "calibrated now",
                spec_note.c_str());
  }
  if (a.want_dckv) {
    std::printf("dckv artifact %s (%s)\n", a.dckv_path.c_str(), a.dckv_cached ? "cached" : "calibrated now");
  }
  if (a.calibration_s > 0) {
    std::printf("calibration: %llu tokens of the calibration text in %.1f s\n",
                static_cast<unsigned long long>(a.calibration_tokens), a.calibration_s);
  }
}

uint64_t PrintWorkload(const DemoWorkload& w, const DemoWorkloadOptions& o) {
  uint64_t prompt_tokens = 0;
  for (const auto& r : w.requests) prompt_tokens += w.PromptTokens(r);
  std::printf(
      "workload: %zu documents (%u tokens each) x %u questions = %zu requests, %llu prompt tokens, seed "
      "%llu\n",
      w.documents.size(), o.doc_tokens, o.requests_per_doc, w.requests.size(),
      static_cast<unsigned long long>(prompt_tokens), static_cast<unsigned long long>(o.seed));
  return prompt_tokens;
}

Result<std::unique_ptr<PrefixCodec>> MakeRunCodec(PrefixCodecKind kind, const DemoSetup& setup,
                                                  std::shared_ptr<const model::SpecPredictor> predictor,
                                                  const DemoArtifacts& artifacts, const std::string& tenant,
                                                  const std::string& cache_salt, DType kv_dtype) {
  PrefixCodecOptions co;
  co.kind = kind;
  co.model_fingerprint = setup.fingerprint;
  co.tenant = tenant;
  co.cache_salt = cache_salt;
  co.kv_dtype = kv_dtype;
  return MakeDemoCodec(kind, *setup.model, std::move(predictor), artifacts, co);
}

DemoRunFacts RunFacts(uint64_t prompt_tokens, double calibration_s, double reference_s, double wall_s,
                      const std::string& run_id, const model::SpecPredictor* predictor) {
  return {.prompt_tokens = prompt_tokens,
          .calibration_s = calibration_s,
          .reference_s = reference_s,
          .wall_s = wall_s,
          .run_id = run_id,
          .predictor = predictor ? predictor->options().VariantName() : ""};
}

int CloseDemo(const DemoOptions& o, const DemoSetup& setup, const DemoWorkload& workload,
              const std::vector<DemoCodecRow>& rows, const nlohmann::json& acceptance, DemoRunFacts facts,
              const nlohmann::json& engine_setup, const nlohmann::json& extra, DemoServer* server) {
  if (!o.json.empty()) {
    facts.model_sha256 = ToHex(setup.fingerprint);
    facts.requests = workload.requests.size();
    for (const auto& d : workload.documents) facts.sources.push_back(d.source);
    const Status w = WriteDemoJson(o, rows, acceptance, facts, engine_setup, extra);
    if (!w.ok()) return Fail("writing " + o.json, w);
  }
  FinishServer(o.start_server, o.keep_server, /*show_dashboard=*/true, server);
  return acceptance["passed"].get<bool>() ? 0 : 1;
}

}  // namespace kvstash::demo
