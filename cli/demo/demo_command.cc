// `kvstash-demo`: the end-to-end demo (demo/demo.h), its flags.
// Exit code: 0 when every acceptance check holds, 1 when one fails, 2 for bad options.
#include <cstdio>
#include <memory>

#include "cli/client_flags.h"
#include "cli/command_registry.h"
#include "demo/demo.h"

namespace kvstash::cli {
namespace {

struct Options {
  demo::DemoOptions demo;
  ClientFlags client;
  std::string kv_dtype = "f16";
  std::string restore_policy = "cost";
  std::string dckv_conditional = "on";
};

// --model-kind, --hybrid-model, --hybrid-chunk-tokens, --state-every, --hybrid-cal-tokens,
// --hybrid-dckv-rate, --hybrid-predictor-group.
void AddHybridDemoFlags(CLI::App* cmd, demo::HybridDemoOptions* f) {
  cmd->add_option("--model-kind", f->model_kind,
                  "smollm2 (SmolLM2-135M, the main demo) or hybrid (Qwen3.5-style Gated DeltaNet + attention, "
                  "KV + recurrent state; token ids of --model's tokenizer modulo its vocabulary)")
      ->check(CLI::IsMember({"smollm2", "hybrid"}))
      ->capture_default_str();
  cmd->add_option(
      "--hybrid-model", f->hybrid_model,
      "With --model-kind hybrid: model folder (config.json + model.safetensors); default the tiny "
      "random-weight fixture tests/model/hybrid/data/tiny_qwen35");
  cmd->add_option("--hybrid-chunk-tokens", f->chunk_tokens, "With --model-kind hybrid: tokens per stored chunk")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  cmd->add_option("--state-every", f->state_every,
                  "With --model-kind hybrid: a state record every N chunks, plus one at the prefix end")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--hybrid-cal-tokens", f->cal_tokens,
                  "With --model-kind hybrid --codec spec: calibration tokens of the calibration text")
      ->check(CLI::Range(uint64_t{64}, uint64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--hybrid-dckv-rate", f->dckv_rate,
                  "With --model-kind hybrid --codec dckv: target ratio of the attention KV vs bf16")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--hybrid-predictor-group", f->predictor_group,
                  "With --model-kind hybrid --codec spec: input channels per int8 scale of the predictor")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
}

const bool kRegistered = RegisterCommand(
    "",
    "End-to-end demo: shared-prefix RAG workload on SmolLM2-135M (or --model, e.g. Qwen2.5-Coder-0.5B on "
    "llama.cpp; llama.cpp or the reference runtime) "
    "through a kvstash server, per codec",
    [](CLI::App* cmd) {
      cmd->footer("Exit status: 0 the acceptance checks passed (token hit rate > 50%; each timed codec's hits "
                  "faster than its misses, or every hit declined by the cost model; no mismatched hit); 1 a check "
                  "failed (the table and --json say which) or an error (server, model or I/O); 2 usage error.");
      auto o = std::make_shared<Options>();
      o->client.tenant = "demo";
      CLI::Option* engine = cmd->add_option("--engine", o->demo.engine,
                      "Inference engine: llama.cpp (misses prefill with llama.cpp, hits restore llama.cpp's own "
                      "cache) or reference (the embedded runtime; --model-kind hybrid always runs on it)")
          ->check(CLI::IsMember({"llama.cpp", "reference"}))
          ->capture_default_str();
      cmd->add_option("--kv-dtype", o->kv_dtype, "With --engine llama.cpp: KV cache dtype (type_k = type_v)")
          ->check(CLI::IsMember({"f16", "bf16"}))
          ->capture_default_str();
      cmd->add_option("--llama-threads", o->demo.llama_threads, "With --engine llama.cpp: llama.cpp threads")
          ->check(CLI::Range(1, 256))
          ->capture_default_str();
      cmd->add_option("--codec", o->demo.codecs, "Codecs to run, in order: raw (bf16 baseline), spec, dckv (repeatable)")
          ->capture_default_str();
      cmd->add_option("--model", o->demo.model_path, "Model file (GGUF with tokenizer)")->capture_default_str();
      o->client.Add(cmd);
      cmd->add_option("--start-server", o->demo.start_server,
                      "Start this kvstash-server binary (else connect to --server)");
      cmd->add_option("--data-dir", o->demo.data_dir, "With --start-server: RocksDB folder")->capture_default_str();
      cmd->add_option("--port", o->demo.port, "With --start-server: protocol port (0: any)")->capture_default_str();
      cmd->add_option("--http-port", o->demo.http_port, "With --start-server: dashboard port (0: any)")
          ->capture_default_str();
      cmd->add_flag("--keep-server", o->demo.keep_server, "With --start-server: leave the server running at the end");
      cmd->add_option("--documents", o->demo.workload.documents, "Workload size: RAG documents")
          ->check(CLI::Range(1u, 1000000u))
          ->capture_default_str();
      cmd->add_option("--doc-tokens", o->demo.workload.doc_tokens, "Workload size: tokens per document")
          ->check(CLI::Range(1u, 1000000u))
          ->capture_default_str();
      cmd->add_option("--requests-per-doc", o->demo.workload.requests_per_doc,
                      "Workload size: requests (different questions) per document; the first request of a "
                      "document is a miss, so the demo's hit-rate check (> 50%) needs at least 3")
          ->check(CLI::Range(1u, 1000000u))
          ->capture_default_str();
      cmd->add_option("--seed", o->demo.workload.seed, "Shuffle seed")->capture_default_str();
      cmd->add_option("--gen-tokens", o->demo.gen_tokens, "Tokens generated per request")->capture_default_str();
      cmd->add_option("--cache-dir", o->demo.artifacts.cache_dir, "Folder of cached codec artifacts")->capture_default_str();
      cmd->add_option("--cal-tokens", o->demo.artifacts.cal_tokens, "Calibration tokens (when not cached)")
          ->capture_default_str();
      cmd->add_option("--dckv-rate", o->demo.artifacts.dckv_rate, "dckv target ratio vs bf16")->capture_default_str();
      cmd->add_option("--predictor-threads", o->demo.predictor_threads, "Threads of the spec predictor")
          ->capture_default_str();
      cmd->add_option(
             "--predictor-arithmetic", o->demo.predictor_arithmetic,
             "With --engine llama.cpp --codec spec: the predictor's arithmetic: ggml (copies llama.cpp's "
             "Q4_1 x Q8_1 products; Q4_1 Llama GGUFs such as SmolLM2's), int (W8A16-g128: any model, "
             "e.g. Qwen2's biases and K-quant blocks; lossless, more bits) or auto (ggml when the model "
             "supports it, else int; the demo prints which and why)")
          ->check(CLI::IsMember({"auto", "ggml", "int"}))
          ->capture_default_str();
      cmd->add_option(
             "--dckv-rows", o->demo.dckv_rows,
             "With --engine llama.cpp: the KV dckv's basis is fitted on: engine (llama.cpp's own KV of "
             "the calibration text, K rotated back to before RoPE) or reference (our runtime's)")
          ->check(CLI::IsMember({"engine", "reference"}))
          ->capture_default_str();
      cmd->add_option("--dckv-conditional", o->dckv_conditional,
                      "With --engine llama.cpp: dckv's token-conditioned and checkerboard entropy models")
          ->check(CLI::IsMember({"on", "off"}))
          ->capture_default_str();
      cmd->add_option(
             "--dckv-weights", o->demo.dckv_weights,
             "With --engine llama.cpp: dckv's per-dimension output weights (weighted PCA): auto (the "
             "committed Fisher weights with the default model, else none), none, or a file of "
             "tools/dckv_output_fisher.py")
          ->check(CLI::IsMember({"auto", "none"}) | CLI::ExistingFile)
          ->capture_default_str();
      cmd->add_option("--restore-policy", o->restore_policy,
                      "Which LOOKUP hits are restored: cost (only when the restore is estimated faster than "
                      "the engine's prefill; the others run as misses and are counted as declined) or always")
          ->check(CLI::IsMember({"cost", "always"}))
          ->capture_default_str();
      cmd->add_option("--json", o->demo.json, "Also write the table as JSON to FILE");
      cmd->add_flag("--quiet", o->demo.quiet, "No per-request progress lines");
      AddHybridDemoFlags(cmd, &o->demo.hybrid);
      return [o, engine] {
        demo::DemoOptions d = o->demo;
        if (d.hybrid.enabled()) {
          if (engine->count() > 0 && d.engine != "reference") {
            std::fprintf(stderr, "kvstash-demo: --model-kind hybrid runs on the reference runtime, not %s\n",
                         d.engine.c_str());
            return 2;
          }
          d.engine = "reference";
        }
        d.client = o->client.Options();
        d.llama_kv_dtype = o->kv_dtype == "bf16" ? DType::kBF16 : DType::kF16;
        ParseRestorePolicy(o->restore_policy, &d.restore_policy);  // checked by IsMember
        d.dckv_conditional = o->dckv_conditional == "on";          // checked by IsMember
        return demo::RunDemo(std::move(d));
      };
    });

}  // namespace
}  // namespace kvstash::cli
