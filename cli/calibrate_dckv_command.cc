// `kvstash calibrate dckv --rate R ...`: runs the target model over the calibration
// corpus (model/corpus/text_corpus.h) and writes one dckv artifact per rate point
// (codec/dckv/dckv_artifact.h) to --out as dckv-g<group>-r<rate>.kvda.
// `kvstash calibrate dckv --trained FILE --base ARTIFACT`: imports a trained codec
// (codec/dckv/dckv_trained.h) on the base artifact it was trained from, refits its
// entropy models on the same calibration rows and writes --out/<FILE stem>.kvda
// (bench::ImportTrainedDckv); prints what it did. The geometry, raw head/tail and
// token embeddings come from the base artifact, so the options that choose them
// (--rate, --group-layers, --embed-rank, --threshold, --raw-head, --raw-tail,
// --no-conditional, --sensitivity-*) are refused with --trained.
#include <cmath>
#include <iostream>
#include <string>

#include "benchmarks/drivers/dckv_bench.h"
#include "cli/command_registry.h"
#include "cli/dckv_flags.h"
#include "cli/output_paths.h"
#include "common/default_paths.h"

namespace kvstash::cli {
namespace {

const bool kRegistered = RegisterCommand(
    "calibrate dckv", "Calibrate the dckv codec (PCA basis, steps, entropy tables) on real text",
    [](CLI::App* cmd) {
      auto o = std::make_shared<bench::DckvBenchOptions>();
      o->model_path = DefaultModelPath();
      o->artifact_dir = DefaultArtifactDir();
      auto rates = std::make_shared<std::vector<double>>();
      auto trained = std::make_shared<std::string>();
      auto base = std::make_shared<std::string>();
      auto* rate =
          cmd->add_option("--rate", *rates, "Target ratio vs bf16 (repeatable; default 8 16 24 32 48)")
              ->check(DckvRatioValidator());
      cmd->add_option("--model", o->model_path, "Target model file")->capture_default_str();
      cmd->add_option("--out", o->artifact_dir, "Output folder")
          ->capture_default_str()
          ->check(WritableOutputDir());
      cmd->add_option("--cal-tokens", o->cal_tokens, "Calibration tokens")->capture_default_str()->check(CLI::PositiveNumber);
      cmd->add_option("--doc-tokens", o->cal_doc_tokens, "Tokens per calibration document")->capture_default_str()->check(CLI::PositiveNumber);
      auto* group = cmd->add_option("--group-layers", o->group_layers, "Layers per transform group")
                        ->capture_default_str()
                        ->check(CLI::PositiveNumber);
      auto* no_cond =
          cmd->add_flag("!--no-conditional", o->conditional, "dckv: no token-conditioned entropy models");
      cmd->add_flag("!--no-checkerboard", o->checkerboard, "dckv: no checkerboard context model");
      auto* rank = cmd->add_option("--embed-rank", o->embed_rank, "dckv: reduced token embedding size")
                       ->capture_default_str();
      auto* head = cmd->add_option("--raw-head", o->raw_head, "bf16 positions at the prefix start")
                       ->capture_default_str();
      auto* tail = cmd->add_option("--raw-tail", o->raw_tail, "bf16 positions at the prefix end")
                       ->capture_default_str();
      auto* threshold = cmd->add_option("--threshold", o->active_threshold, "Component off below scale/step")
                            ->capture_default_str()
                            ->check(CLI::NonNegativeNumber);
      auto* docs = cmd->add_option("--sensitivity-docs", o->sensitivity_docs,
                                   "Measure per-block output weights on this many calibration documents "
                                   "(0: MSE allocation) instead of reading a weights file (default 2 when no "
                                   "file is used; the default model uses its committed file)");
      auto* file = cmd->add_option("--sensitivity-file", o->sensitivity_file,
                                   "Per-dimension output weights from tools/dckv_output_fisher.py (default with "
                                   "the default model: benchmarks/inputs/smollm2-135m-dckv-fisher.json)")
                       ->check(CLI::ExistingFile)
                       ->excludes(docs);
      auto* floor = cmd->add_option("--sensitivity-floor", o->sensitivity_floor,
                                    "Output weights below this x their mean are raised to it")
                        ->capture_default_str()
                        ->check(PositiveFiniteValidator());
      auto* trained_opt =
          cmd->add_option("--trained", *trained,
                          "Import this trained codec (safetensors from tools/train_dckv.py) instead of "
                          "calibrating: refits its entropy models on the calibration rows, writes "
                          "<out>/<file stem>.kvda (needs --base)")
              ->check(CLI::ExistingFile)
              ->excludes(rate)
              ->excludes(group)
              ->excludes(no_cond)
              ->excludes(rank)
              ->excludes(head)
              ->excludes(tail)
              ->excludes(threshold)
              ->excludes(docs)
              ->excludes(file)
              ->excludes(floor);
      cmd->add_option("--base", *base, "The artifact the trained codec started from (with --trained)")
          ->check(CLI::ExistingFile)
          ->needs(trained_opt);
      trained_opt->needs("--base");
      return [o, rates, docs, file, trained, base] {
        if (!trained->empty()) {
          auto summary = bench::ImportTrainedDckv(*o, *trained, *base);
          if (!summary.ok()) {
            std::cerr << "kvstash calibrate dckv: " << summary.status().ToString() << "\n";
            return 1;
          }
          std::cout << *summary;
          return 0;
        }
        if (!rates->empty()) o->rates = *rates;
        bench::ApplyDefaultSensitivity(o.get(), file->count() > 0, docs->count() > 0);
        if (Status s = bench::CalibrateDckv(*o); !s.ok()) {
          std::cerr << "kvstash calibrate dckv: " << s.ToString() << "\n";
          return 1;
        }
        return 0;
      };
    });

}  // namespace
}  // namespace kvstash::cli
