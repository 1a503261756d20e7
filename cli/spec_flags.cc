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
  cmd->add_option("--predictor", o->predictor_arithmetic,
                  "Predictor arithmetic: int (our int8 GEMMs) or ggml (llama.cpp's CPU Q4_1 x Q8_1, "
                  "GGUF Q4_1 models)")
      ->check(CLI::IsMember({"int", "ggml"}))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--predictor-kv-dtype",
         [o](const std::string& v) { o->predictor_kv_dtype = v == "f16" ? DType::kF16 : DType::kBF16; },
         "ggml predictor: the KV cache dtype llama.cpp keeps (f16 or bf16; default bf16)")
      ->check(CLI::IsMember({"f16", "bf16"}));
  cmd->add_option_function<std::string>(
         "--predictor-attention", [o](const std::string& v) { o->predictor_int8_attention = v == "int8"; },
         "int predictor: fp32 (the canonical fp32 attention; default) or int8 (the \"-attn8\" variant: "
         "int8 K/V, integer GEMMs)")
      ->check(CLI::IsMember({"fp32", "int8"}));
}

}  // namespace kvstash::cli
