#include "demo/demo.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "demo/demo_llama.h"
#include "demo/demo_report.h"
#include "demo/demo_runner.h"
#include "demo/demo_server.h"
#include "demo/demo_setup.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/sha256.h"
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
  DemoServer server;
  DemoSetup setup;
  if (const int code = OpenDemo(o, &o.client, &server, &setup); code != 0) return code;
  const model::Model& model = *setup.model;
  const DemoCodecs& codecs = setup.codecs;

  // Predictor, artifacts.
  const auto t0 = Clock::now();
  std::shared_ptr<const model::SpecPredictor> predictor;
  if (codecs.want_spec) {
    model::SpecPredictorOptions po;
    po.threads = o.predictor_threads;
    auto p = model::SpecPredictor::Create(model, po);
    if (!p.ok()) return Fail("spec predictor", p.status());
    predictor = std::move(p).value();
  }
  const double load_s = setup.load_s + Secs(t0);
  auto artifacts = LoadOrCalibrateArtifacts(model, setup.fingerprint, predictor.get(), codecs.want_spec,
                                            codecs.want_dckv, o.artifacts);
  if (!artifacts.ok()) return Fail("codec artifacts", artifacts.status());
  PrintArtifacts(*artifacts, "");

  auto workload = BuildDemoWorkload(*model.tokenizer, o.workload);
  if (!workload.ok()) return Fail("workload", workload.status());
  const uint64_t prompt_tokens = PrintWorkload(*workload, o.workload);
  std::fflush(stdout);

  DemoRunOptions ro;
  ro.gen_tokens = o.gen_tokens;
  // A fresh cache salt per run: entries of an earlier run (RocksDB persists) never hit.
  const std::string run_id = RandomHex(8);
  ro.verbose = !o.quiet;
  ro.restore_policy = o.restore_policy;
  auto reference = std::make_unique<DemoReference>();  // filled by the codec passes

  std::vector<DemoCodecRow> rows;
  for (PrefixCodecKind k : codecs.kinds) {
    PrefixCodecOptions co;
    co.kind = k;
    co.model_fingerprint = setup.fingerprint;
    co.tenant = o.client.tenant;
    co.cache_salt = "demo-" + run_id;
    auto codec = MakeDemoCodec(k, model, predictor, *artifacts, co);
    if (!codec.ok()) return Fail(std::string("codec ") + PrefixCodecName(k), codec.status());
    auto row = RunDemoCodec(model, *workload, reference.get(), std::move(codec).value(), setup.client, ro);
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
  const DemoRunFacts facts{.prompt_tokens = prompt_tokens,
                           .calibration_s = artifacts->calibration_s,
                           .reference_s = reference->wall_s,
                           .wall_s = wall_s,
                           .run_id = run_id,
                           .predictor = predictor ? predictor->options().VariantName() : ""};
  return CloseDemo(o, setup, *workload, rows, acceptance, facts,
                   {{"engine", "reference"}, {"kv_dtype", "bf16"}}, nlohmann::json::object(), &server);
}

}  // namespace kvstash::demo
