#include "demo/demo_llama.h"

#include <cstdio>
#include <iostream>

#include "demo/demo_report.h"
#include "demo/demo_runner.h"
#include "demo/demo_server.h"
#include "demo/demo_setup.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/sha256.h"
#include "model/formats/model_loader.h"
#include "model/predictor/spec_predictor.h"

#if KVSTASH_DEMO_LLAMA
#include "demo/demo_llama_runner.h"
#include "engines/llama_cpp/llama_engine.h"
#include "engines/llama_cpp/llama_state.h"
#include "model/forward/prefill.h"
#endif

namespace kvstash::demo {

#if !KVSTASH_DEMO_LLAMA

int RunLlamaDemo(const DemoOptions&) {
  std::cerr << "kvstash-demo: this build has no llama.cpp (run scripts/setup.sh, which installs it, then "
               "rebuild), or pass --engine reference\n";
  return 1;
}

#else

namespace {

int Fail(const std::string& what, const Status& s) { return demo::Fail("kvstash-demo", what, s); }

// llama.cpp's KV of `tokens`, prefilled in one batch in a fresh context of `params`.
Result<KvChunk> LlamaKv(llama_model* lm, const llama_context_params& params, std::span<const uint32_t> tokens) {
  KVSTASH_ASSIGN_OR_RETURN(auto layout, llama_cpp::StateLayoutOf(lm, params));
  KVSTASH_ASSIGN_OR_RETURN(auto ctx, llama_cpp::NewContext(lm, params));
  const std::vector<llama_token> ids(tokens.begin(), tokens.end());
  KVSTASH_RETURN_IF_ERROR(llama_cpp::Evaluate(ctx.get(), ids, 0).status());
  KVSTASH_ASSIGN_OR_RETURN(auto bytes, llama_cpp::ExportSeqState(ctx.get()));
  KVSTASH_ASSIGN_OR_RETURN(auto state, llama_cpp::ParseSeqState(bytes, layout));
  return std::move(state.kv);
}

// spec's bytes for every document prefix's KV from our runtime (same tokens, same
// codec): the "our runtime's KV" column beside llama.cpp's.
Result<PrefixEncodeStats> SpecOnOurKv(const model::Model& m, const DemoWorkload& w, const PrefixCodec& codec) {
  PrefixEncodeStats total;
  for (const DemoDocument& d : w.documents) {
    auto cache = model::KvCache::ForModel(m.config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    KVSTASH_RETURN_IF_ERROR(model::Prefill(m, d.prefix, &cache, po).status());
    PrefixEncodeStats es;
    KVSTASH_RETURN_IF_ERROR(codec.EncodeChunks(d.prefix, cache, 0, &es).status());
    total.raw_bytes += es.raw_bytes;
    total.stored_bytes += es.stored_bytes;
  }
  return total;
}

double BitsPerScalar(uint64_t stored, uint64_t raw) { return raw ? 16.0 * double(stored) / double(raw) : 0; }

// The spec predictor that copies llama.cpp's CPU arithmetic (Q4_1 x Q8_1 products,
// attention over the cache in its dtype): it predicts llama.cpp's KV, not ours.
Result<std::unique_ptr<model::SpecPredictor> > LlamaPredictor(const model::Model& model,
                                                              const DemoOptions& o) {
  model::SpecPredictorOptions po;
  po.threads = o.predictor_threads;
  po.arithmetic = model::SpecPredictorOptions::Arithmetic::kGgml;
  po.kv_dtype = o.llama_kv_dtype;
  return model::SpecPredictor::Create(model, po);
}

}  // namespace

int RunLlamaDemo(const DemoOptions& o) {
  const auto t_start = Clock::now();
  if (o.llama_kv_dtype != DType::kF16 && o.llama_kv_dtype != DType::kBF16) {
    std::cerr << "kvstash-demo: --kv-dtype must be f16 or bf16\n";
    return 2;
  }
  DemoServer server;
  ClientOptions client_options = o.client;
  DemoSetup setup;
  if (const int code = OpenDemo(o, &client_options, &server, &setup); code != 0) return code;
  const model::Model& model = *setup.model;  // our runtime's copy: tokenizer, predictor, dckv calibration
  const DemoCodecs& codecs = setup.codecs;
  auto t0 = Clock::now();
  llama_cpp::InitLlamaBackend();
  auto lm = llama_cpp::LoadModel(o.model_path);
  if (!lm.ok()) return Fail("llama.cpp loading " + o.model_path, lm.status());
  std::shared_ptr<const model::SpecPredictor> predictor;
  if (codecs.want_spec) {
    auto p = LlamaPredictor(model, o);
    if (!p.ok()) return Fail("spec predictor", p.status());
    predictor = std::move(p).value();
  }
  const double load_s = setup.load_s + Secs(t0);

  auto workload = BuildDemoWorkload(*model.tokenizer, o.workload);
  if (!workload.ok()) return Fail("workload", workload.status());
  uint64_t longest = 0;
  for (const auto& r : workload->requests) longest = std::max<uint64_t>(longest, workload->PromptTokens(r));
  // The context holds the longest prompt and its answer (and a calibration document).
  const uint64_t need = std::max<uint64_t>(longest + o.gen_tokens, o.artifacts.cal_doc_tokens);
  const auto n_ctx = static_cast<uint32_t>((need + 255) / 256 * 256);
  auto params = llama_cpp::ContextParams(n_ctx, o.llama_threads, /*flash_attn=*/false, o.llama_kv_dtype);
  if (!params.ok()) return Fail("llama.cpp context parameters", params.status());

  DemoArtifactOptions ao = o.artifacts;
  ao.kv_dtype = o.llama_kv_dtype;
  ao.engine_name = "llama.cpp-0.3.36-fa-off";
  ao.engine_kv = [&](std::span<const uint32_t> tokens) { return LlamaKv(lm->get(), *params, tokens); };
  auto artifacts = LoadOrCalibrateArtifacts(model, setup.fingerprint, predictor.get(), codecs.want_spec,
                                            codecs.want_dckv, ao);
  if (!artifacts.ok()) return Fail("codec artifacts", artifacts.status());
  PrintArtifacts(*artifacts, "; tables of llama.cpp's " + std::string(DTypeName(o.llama_kv_dtype)) + " KV");
  std::printf("engine: llama.cpp (llama-cpp-python 0.3.36), %s KV, flash attention off, %d threads, context %u\n",
              std::string(DTypeName(o.llama_kv_dtype)).c_str(), o.llama_threads, n_ctx);
  const uint64_t prompt_tokens = PrintWorkload(*workload, o.workload);
  std::fflush(stdout);

  LlamaDemoRunOptions ro;
  ro.params = *params;
  ro.gen_tokens = o.gen_tokens;
  ro.verbose = !o.quiet;
  ro.restore_policy = o.restore_policy;
  const std::string run_id = RandomHex(8);  // fresh cache salt: earlier runs never hit
  LlamaDemoReference reference;
  std::vector<DemoCodecRow> rows;
  nlohmann::json spec_bits = nullptr;
  for (PrefixCodecKind k : codecs.kinds) {
    PrefixCodecOptions co;
    co.kind = k;
    co.model_fingerprint = setup.fingerprint;
    co.tenant = client_options.tenant;
    co.cache_salt = "demo-llama-" + run_id;
    co.kv_dtype = o.llama_kv_dtype;
    auto codec = MakeDemoCodec(k, model, predictor, *artifacts, co);
    if (!codec.ok()) return Fail(std::string("codec ") + PrefixCodecName(k), codec.status());
    std::shared_ptr<const PrefixCodec> shared(std::move(codec).value());
    auto row = RunLlamaDemoCodec(lm->get(), *workload, &reference, shared, setup.client, ro);
    if (!row.ok()) return Fail(std::string("run ") + PrefixCodecName(k), row.status());
    rows.push_back(*row);
    if (k == PrefixCodecKind::kSpec) {
      t0 = Clock::now();
      auto ours = SpecOnOurKv(model, *workload, *shared);
      if (!ours.ok()) return Fail("spec on our runtime's KV", ours.status());
      spec_bits = {{"dtype", DTypeName(o.llama_kv_dtype)},
                   {"llama_cpp_kv", BitsPerScalar(row->stored_bytes, row->raw_bytes)},
                   {"our_runtime_kv", BitsPerScalar(ours->stored_bytes, ours->raw_bytes)},
                   {"our_runtime_kv_raw_bytes", ours->raw_bytes},
                   {"our_runtime_kv_stored_bytes", ours->stored_bytes},
                   {"wall_s", Secs(t0)}};
    }
  }

  // TTFT is required below the miss for raw and dckv; spec's is reported (see header).
  const auto acceptance = DemoAcceptance(rows, {"spec"});
  const double wall_s = Secs(t_start);
  std::printf("\n%s", DemoTable(rows).c_str());
  if (!spec_bits.is_null()) {
    std::printf("\nspec on the same document prefixes, %s KV: llama.cpp's KV %.3f bits/scalar (%.2fx), our runtime's "
                "KV %.3f bits/scalar (%.2fx)\n",
                std::string(DTypeName(o.llama_kv_dtype)).c_str(), spec_bits["llama_cpp_kv"].get<double>(),
                16.0 / spec_bits["llama_cpp_kv"].get<double>(), spec_bits["our_runtime_kv"].get<double>(),
                16.0 / spec_bits["our_runtime_kv"].get<double>());
  }
  std::printf("\nacceptance: token hit rate > 50%%: %s; hit TTFT < miss TTFT (%s): %s; every hit loaded, raw/spec "
              "logit-identical: %s\n",
              acceptance["token_hit_rate_over_50"].get<bool>() ? "yes" : "NO",
              acceptance["hit_ttft_below_miss_codecs"].get<std::string>().c_str(),
              acceptance["hit_ttft_below_miss"].get<bool>() ? "yes" : "NO",
              acceptance["no_mismatch"].get<bool>() ? "yes" : "NO");
  std::printf("demo wall time %.1f s (model load %.1f s, calibration %.1f s, llama.cpp reference answers %.1f s)\n",
              wall_s, load_s, artifacts->calibration_s, reference.wall_s);

  const DemoRunFacts facts{.prompt_tokens = prompt_tokens,
                           .calibration_s = artifacts->calibration_s,
                           .reference_s = reference.wall_s,
                           .wall_s = wall_s,
                           .run_id = run_id,
                           .predictor = predictor ? predictor->options().VariantName() : ""};
  return CloseDemo(o, setup, *workload, rows, acceptance, facts,
                   {{"engine", "llama.cpp"},
                    {"llama_cpp", "llama-cpp-python 0.3.36, flash attention off"},
                    {"llama_threads", o.llama_threads},
                    {"n_ctx", n_ctx},
                    {"kv_dtype", DTypeName(o.llama_kv_dtype)}},
                   {{"spec_bits_per_scalar", spec_bits}}, &server);
}

#endif  // KVSTASH_DEMO_LLAMA

}  // namespace kvstash::demo
