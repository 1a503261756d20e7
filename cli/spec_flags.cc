#include "cli/spec_flags.h"

namespace kvstash::cli {

void AddSpecRunOptions(CLI::App* cmd, bench::SpecBenchOptions* o) {
  cmd->add_option("--model", o->model_path, "Target model file")->capture_default_str();
  cmd->add_option("--cal-tokens", o->cal_tokens, "Calibration tokens")->capture_default_str();
  cmd->add_option("--doc-tokens", o->doc_tokens, "Tokens per prompt")->capture_default_str();
  cmd->add_option("--chunk-tokens", o->chunk_tokens, "Tokens per chunk")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Predictor threads")->capture_default_str();
  cmd->add_option("--predictor-group", o->predictor_group,
                  "Predictor quantisation group (0 = per channel)")->capture_default_str();
  cmd->add_option("--predictor-activation-bits", o->predictor_activation_bits,
                  "Predictor activation bits: 8 or 16")->capture_default_str();
}

}  // namespace kvstash::cli
