#include "demo/demo_reference.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "demo/demo_report.h"
#include "demo/demo_runner.h"
#include "demo/demo_server.h"
#include "demo/demo_setup.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/sha256.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::demo {
namespace {

int Fail(const std::string& what, const Status& s) { return demo::Fail("kvstash-demo", what, s); }

class ReferenceDemo final : public DemoEngine {
 public:
  explicit ReferenceDemo(DemoOptions o)
      : o_(std::move(o)), ro_{o_.gen_tokens, !o_.quiet, o_.restore_policy} {}

  int Open() override {
    if (const int code = OpenDemo(o_, &o_.client, &server_, &setup_); code != 0) return code;
    const model::Model& model = *setup_.model;
    // Predictor, artifacts.
    const auto t0 = Clock::now();
    if (setup_.codecs.want_spec) {
      model::SpecPredictorOptions po;
      po.threads = o_.predictor_threads;
      auto p = model::SpecPredictor::Create(model, po);
      if (!p.ok()) return Fail("spec predictor", p.status());
      predictor_ = std::move(p).value();
    }
    load_s_ = setup_.load_s + Secs(t0);
    auto artifacts = LoadOrCalibrateArtifacts(model, setup_.fingerprint, predictor_.get(),
                                              setup_.codecs.want_spec, setup_.codecs.want_dckv, o_.artifacts);
    if (!artifacts.ok()) return Fail("codec artifacts", artifacts.status());
    artifacts_ = std::move(artifacts).value();
    PrintArtifacts(artifacts_, "");
    auto workload = BuildDemoWorkload(*model.tokenizer, o_.workload);
    if (!workload.ok()) return Fail("workload", workload.status());
    workload_ = std::move(workload).value();
    prompt_tokens_ = PrintWorkload(workload_, o_.workload);
    std::fflush(stdout);
    return 0;
  }

  size_t codec_count() const override { return setup_.codecs.kinds.size(); }

  int RunCodec(size_t i) override {
    const PrefixCodecKind k = setup_.codecs.kinds[i];
    auto codec =
        MakeRunCodec(k, setup_, predictor_, artifacts_, o_.client.tenant, "demo-" + run_id_, DType::kBF16);
    if (!codec.ok()) return Fail(std::string("codec ") + PrefixCodecName(k), codec.status());
    auto row =
        RunDemoCodec(*setup_.model, workload_, &reference_, std::move(codec).value(), setup_.client, ro_);
    if (!row.ok()) return Fail(std::string("run ") + PrefixCodecName(k), row.status());
    rows_.push_back(std::move(row).value());
    return 0;
  }

  int Close() override {
    const auto acceptance = DemoAcceptance(rows_);
    const double wall_s = Secs(t_start_);
    std::printf("\n%s", DemoTable(rows_).c_str());
    std::printf("\nacceptance: token hit rate > 50%%: %s; hit TTFT < miss TTFT: %s; no mismatched hit: %s\n",
                acceptance["token_hit_rate_over_50"].get<bool>() ? "yes" : "NO",
                acceptance["hit_ttft_below_miss"].get<bool>() ? "yes" : "NO",
                acceptance["no_mismatch"].get<bool>() ? "yes" : "NO");
    std::printf("demo wall time %.1f s (model load %.1f s, calibration %.1f s, reference answers %.1f s)\n",
                wall_s, load_s_, artifacts_.calibration_s, reference_.wall_s);
    return CloseDemo(o_, setup_, workload_, rows_, acceptance,
                     RunFacts(prompt_tokens_, artifacts_.calibration_s, reference_.wall_s, wall_s, run_id_,
                              predictor_.get()),
                     {{"engine", "reference"}, {"kv_dtype", "bf16"}}, nlohmann::json::object(), &server_);
  }

 private:
  DemoOptions o_;
  const Clock::time_point t_start_ = Clock::now();
  // A fresh cache salt per run: entries of an earlier run (RocksDB persists) never hit.
  const std::string run_id_ = RandomHex(8);
  DemoServer server_;
  DemoSetup setup_;
  std::shared_ptr<const model::SpecPredictor> predictor_;
  double load_s_ = 0;
  DemoArtifacts artifacts_;
  DemoWorkload workload_;
  uint64_t prompt_tokens_ = 0;
  DemoRunOptions ro_;
  DemoReference reference_;  // filled by the codec passes
  std::vector<DemoCodecRow> rows_;
};

}  // namespace

std::unique_ptr<DemoEngine> MakeReferenceDemo(DemoOptions options) {
  return std::make_unique<ReferenceDemo>(std::move(options));
}

}  // namespace kvstash::demo
