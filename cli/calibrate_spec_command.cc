// `kvstash calibrate spec`: runs the target model and the deterministic predictor over
// the calibration corpus (model/corpus/text_corpus.h) and writes one spec artifact per dtype
// (codec/spec/spec_artifact.h) to --out.
#include <iostream>

#include "benchmarks/drivers/spec_bench.h"
#include "cli/command_registry.h"
#include "cli/output_paths.h"
#include "cli/spec_flags.h"
#include "common/default_paths.h"

namespace kvstash::cli {
namespace {

struct Options {
  std::string dtype = "both";
  bench::SpecBenchOptions spec;
};

int Run(Options o) {
  if (o.dtype == "both") {
    o.spec.dtypes = {DType::kBF16, DType::kFP8E4M3};
  } else if (auto d = ParseDType(o.dtype); d.ok() && (*d == DType::kBF16 || *d == DType::kFP8E4M3)) {
    o.spec.dtypes = {*d};
  } else {
    std::cerr << "kvstash calibrate spec: --dtype must be bf16, fp8 or both\n";
    return 2;
  }
  if (Status s = bench::CalibrateSpec(o.spec); !s.ok()) {
    std::cerr << "kvstash calibrate spec: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}

const bool kRegistered = RegisterCommand(
    "calibrate spec", "Calibrate the spec codec (residual spreads, frequency tables) on real text",
    [](CLI::App* cmd) {
      auto o = std::make_shared<Options>();
      o->spec.model_path = DefaultModelPath();
      o->spec.artifact_dir = DefaultArtifactDir();
      cmd->add_option("--dtype", o->dtype, "KV dtype: bf16, fp8 or both")->capture_default_str();
      cmd->add_option("--out", o->spec.artifact_dir, "Output folder")
          ->capture_default_str()
          ->check(WritableOutputDir());
      AddSpecRunOptions(cmd, &o->spec);
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
