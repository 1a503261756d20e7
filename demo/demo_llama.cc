#include "demo/demo_llama.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

namespace {

// A build without llama.cpp: Open says how to get it.
class NoLlamaDemo final : public DemoEngine {
 public:
  int Open() override {
    std::cerr << "kvstash-demo: this build has no llama.cpp (run scripts/setup.sh, which installs it, then "
                 "rebuild), or pass --engine reference\n";
    return 1;
  }
  size_t codec_count() const override { return 0; }
  int RunCodec(size_t) override { return 1; }
  int Close() override { return 1; }
};

}  // namespace

std::unique_ptr<DemoEngine> MakeLlamaDemo(const DemoOptions&) { return std::make_unique<NoLlamaDemo>(); }

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

// spec's predictor for llama.cpp's KV, with the arithmetic it uses and why.
struct LlamaPredictorChoice {
  std::unique_ptr<model::SpecPredictor> predictor;
  std::string arithmetic;  // "ggml" or "int"
  std::string reason;      // why that arithmetic (printed and in the JSON setup)
};

// The predictor of options.predictor_arithmetic (see DemoOptions): the ggml arithmetic
// (llama.cpp's Q4_1 x Q8_1 products, attention over the cache in its dtype: it predicts
// llama.cpp's KV, not ours) when asked for, or with "auto" when the model supports it;
// else the int arithmetic (W8A16-g128), which handles q/k/v biases and every block type.
// Errors: InvalidArgument for another arithmetic name; SpecPredictor::Create's errors
// (NotSupported for "ggml" on a model the ggml arithmetic cannot run).
Result<LlamaPredictorChoice> LlamaPredictor(const model::Model& model, const DemoOptions& o) {
  const std::string& want = o.predictor_arithmetic;
  if (want != "auto" && want != "ggml" && want != "int") {
    return Status::InvalidArgument("--predictor-arithmetic must be auto, ggml or int, not " + want);
  }
  model::SpecPredictorOptions po;
  po.threads = o.predictor_threads;
  po.kv_dtype = o.llama_kv_dtype;
  LlamaPredictorChoice c;
  const Status ggml = model::GgmlArithmeticSupport(model);
  if (want == "ggml" || (want == "auto" && ggml.ok())) {
    po.arithmetic = model::SpecPredictorOptions::Arithmetic::kGgml;
    c.arithmetic = "ggml";
    c.reason = want == "ggml" ? "--predictor-arithmetic ggml"
                              : "auto: the model runs on the ggml arithmetic, which copies llama.cpp's CPU "
                                "products and predicts its KV best";
  } else {
    po.arithmetic = model::SpecPredictorOptions::Arithmetic::kInt;  // group 128, 16-bit activations
    c.arithmetic = "int";
    c.reason = want == "int" ? "--predictor-arithmetic int"
                             : "auto: the ggml arithmetic cannot run this model (" + ggml.message() +
                                   "); the int arithmetic keeps spec lossless at more bits per scalar";
  }
  KVSTASH_ASSIGN_OR_RETURN(c.predictor, model::SpecPredictor::Create(model, po));
  return c;
}

// The output weights file of options.dckv_weights ("" = none): "auto" is the committed
// Fisher file when the model is the default model file (the weights are per dimension
// of that model) and the file exists, as `kvstash calibrate dckv` decides.
std::string DckvWeightsFile(const DemoOptions& o) {
  if (o.dckv_weights == "none") return "";
  if (o.dckv_weights != "auto") return o.dckv_weights;
  std::error_code ec;
  if (!std::filesystem::equivalent(o.model_path, DefaultModelPath(), ec))
    return "";  // false on any error too
  const std::string file = DefaultDckvSensitivityFile();
  return std::filesystem::is_regular_file(file, ec) ? file : "";
}

// llama.cpp's demo (see the header).
class LlamaDemo final : public DemoEngine {
 public:
  explicit LlamaDemo(const DemoOptions& o) : o_(o), client_options_(o.client) {}

  int Open() override {
    if (o_.llama_kv_dtype != DType::kF16 && o_.llama_kv_dtype != DType::kBF16) {
      std::cerr << "kvstash-demo: --kv-dtype must be f16 or bf16\n";
      return 2;
    }
    if (const int code = OpenDemo(o_, &client_options_, &server_, &setup_); code != 0) return code;
    const model::Model& model = *setup_.model;  // our runtime's copy: tokenizer, predictor, dckv calibration
    const auto t0 = Clock::now();
    llama_cpp::InitLlamaBackend();
    auto lm = llama_cpp::LoadModel(o_.model_path);
    if (!lm.ok()) return Fail("llama.cpp loading " + o_.model_path, lm.status());
    lm_ = std::move(lm).value();
    if (setup_.codecs.want_spec) {
      auto p = LlamaPredictor(model, o_);
      if (!p.ok()) return Fail("spec predictor", p.status());
      predictor_ = std::move(p->predictor);
      predictor_arithmetic_ = p->arithmetic;
      predictor_reason_ = p->reason;
      std::printf("spec predictor: %s, %s arithmetic (%s)\n", predictor_->options().VariantName().c_str(),
                  p->arithmetic.c_str(), p->reason.c_str());
    }
    load_s_ = setup_.load_s + Secs(t0);

    auto workload = BuildDemoWorkload(*model.tokenizer, o_.workload);
    if (!workload.ok()) return Fail("workload", workload.status());
    workload_ = std::move(workload).value();
    uint64_t longest = 0;
    for (const auto& r : workload_.requests) longest = std::max<uint64_t>(longest, workload_.PromptTokens(r));
    // The context holds the longest prompt and its answer (and a calibration document).
    const uint64_t need = std::max<uint64_t>(longest + o_.gen_tokens, o_.artifacts.cal_doc_tokens);
    n_ctx_ = static_cast<uint32_t>((need + 255) / 256 * 256);
    auto params = llama_cpp::ContextParams(n_ctx_, o_.llama_threads, /*flash_attn=*/false, o_.llama_kv_dtype);
    if (!params.ok()) return Fail("llama.cpp context parameters", params.status());
    ro_.params = *params;
    return OpenArtifacts();
  }

  size_t codec_count() const override { return setup_.codecs.kinds.size(); }

  int RunCodec(size_t i) override {
    const PrefixCodecKind k = setup_.codecs.kinds[i];
    auto codec = MakeRunCodec(k, setup_, predictor_, artifacts_, client_options_.tenant,
                              "demo-llama-" + run_id_, o_.llama_kv_dtype);
    if (!codec.ok()) return Fail(std::string("codec ") + PrefixCodecName(k), codec.status());
    std::shared_ptr<const PrefixCodec> shared(std::move(codec).value());
    auto row = RunLlamaDemoCodec(lm_.get(), workload_, &reference_, shared, setup_.client, ro_);
    if (!row.ok()) return Fail(std::string("run ") + PrefixCodecName(k), row.status());
    rows_.push_back(*row);
    if (k != PrefixCodecKind::kSpec) return 0;
    const auto t0 = Clock::now();
    auto ours = SpecOnOurKv(*setup_.model, workload_, *shared);
    if (!ours.ok()) return Fail("spec on our runtime's KV", ours.status());
    spec_bits_ = {{"dtype", DTypeName(o_.llama_kv_dtype)},
                  {"llama_cpp_kv", BitsPerScalar(row->stored_bytes, row->raw_bytes)},
                  {"our_runtime_kv", BitsPerScalar(ours->stored_bytes, ours->raw_bytes)},
                  {"our_runtime_kv_raw_bytes", ours->raw_bytes},
                  {"our_runtime_kv_stored_bytes", ours->stored_bytes},
                  {"wall_s", Secs(t0)}};
    return 0;
  }

  int Close() override {
    // TTFT is required below the miss for raw and dckv; spec's is reported (see header).
    const auto acceptance = DemoAcceptance(rows_, {"spec"});
    const double wall_s = Secs(t_start_);
    std::printf("\n%s", DemoTable(rows_).c_str());
    if (!spec_bits_.is_null()) {
      std::printf(
          "\nspec on the same document prefixes, %s KV: llama.cpp's KV %.3f bits/scalar (%.2fx), our "
          "runtime's "
          "KV %.3f bits/scalar (%.2fx)\n",
          std::string(DTypeName(o_.llama_kv_dtype)).c_str(), spec_bits_["llama_cpp_kv"].get<double>(),
          16.0 / spec_bits_["llama_cpp_kv"].get<double>(), spec_bits_["our_runtime_kv"].get<double>(),
          16.0 / spec_bits_["our_runtime_kv"].get<double>());
    }
    std::printf(
        "\nacceptance: token hit rate > 50%%: %s; hit TTFT < miss TTFT (%s): %s; every hit loaded, raw/spec "
        "logit-identical: %s\n",
        acceptance["token_hit_rate_over_50"].get<bool>() ? "yes" : "NO",
        acceptance["hit_ttft_below_miss_codecs"].get<std::string>().c_str(),
        acceptance["hit_ttft_below_miss"].get<bool>() ? "yes" : "NO",
        acceptance["no_mismatch"].get<bool>() ? "yes" : "NO");
    std::printf(
        "demo wall time %.1f s (model load %.1f s, calibration %.1f s, llama.cpp reference answers %.1f s)\n",
        wall_s, load_s_, artifacts_.calibration_s, reference_.wall_s);
    return CloseDemo(o_, setup_, workload_, rows_, acceptance,
                     RunFacts(prompt_tokens_, artifacts_.calibration_s, reference_.wall_s, wall_s, run_id_,
                              predictor_.get()),
                     {{"engine", "llama.cpp"},
                      {"llama_cpp", "llama-cpp-python 0.3.36, flash attention off"},
                      {"llama_threads", o_.llama_threads},
                      {"n_ctx", n_ctx_},
                      {"kv_dtype", DTypeName(o_.llama_kv_dtype)},
                      {"predictor_arithmetic", predictor_arithmetic_},
                      {"predictor_arithmetic_reason", predictor_reason_},
                      {"dckv_fit", setup_.codecs.want_dckv ? dckv_fit_ : nlohmann::json(nullptr)}},
                     {{"spec_bits_per_scalar", spec_bits_}}, &server_);
  }

 private:
  // The codec artifacts (spec's tables from llama.cpp's KV) and the engine and workload
  // lines; the pass options.
  int OpenArtifacts() {
    DemoArtifactOptions ao = o_.artifacts;
    ao.kv_dtype = o_.llama_kv_dtype;
    ao.engine_name = "llama.cpp-0.3.36-fa-off";
    ao.engine_kv = [this](std::span<const uint32_t> tokens) {
      return LlamaKv(lm_.get(), ro_.params, tokens);
    };
    ao.dckv_engine_rows = o_.dckv_rows == "engine";
    ao.dckv_conditional = o_.dckv_conditional;
    ao.dckv_weights_file = DckvWeightsFile(o_);
    auto artifacts = LoadOrCalibrateArtifacts(*setup_.model, setup_.fingerprint, predictor_.get(),
                                              setup_.codecs.want_spec, setup_.codecs.want_dckv, ao);
    if (!artifacts.ok()) return Fail("codec artifacts", artifacts.status());
    artifacts_ = std::move(artifacts).value();
    dckv_fit_ = {{"rows", ao.dckv_engine_rows ? "llama.cpp " + std::string(DTypeName(o_.llama_kv_dtype)) +
                                                    " KV, K rotated back to before RoPE"
                                              : std::string("our runtime's fp32 KV")},
                 {"conditional", ao.dckv_conditional},
                 {"weights", ao.dckv_weights_file.empty() ? "none" : ao.dckv_weights_file}};
    if (artifacts_.dckv_rows_rms_k >= 0) {
      dckv_fit_["rows_rel_rms_vs_our_runtime"] = {{"k_pre_rope", artifacts_.dckv_rows_rms_k},
                                                  {"v", artifacts_.dckv_rows_rms_v}};
    }
    PrintArtifacts(artifacts_,
                   "; tables of llama.cpp's " + std::string(DTypeName(o_.llama_kv_dtype)) + " KV");
    if (setup_.codecs.want_dckv) {
      std::printf("dckv fitted on %s, conditional models %s, output weights %s\n",
                  dckv_fit_["rows"].get<std::string>().c_str(), ao.dckv_conditional ? "on" : "off",
                  dckv_fit_["weights"].get<std::string>().c_str());
    }
    std::printf(
        "engine: llama.cpp (llama-cpp-python 0.3.36), %s KV, flash attention off, %d threads, context %u\n",
        std::string(DTypeName(o_.llama_kv_dtype)).c_str(), o_.llama_threads, n_ctx_);
    prompt_tokens_ = PrintWorkload(workload_, o_.workload);
    std::fflush(stdout);
    ro_.gen_tokens = o_.gen_tokens;
    ro_.verbose = !o_.quiet;
    ro_.restore_policy = o_.restore_policy;
    return 0;
  }

  const DemoOptions& o_;
  ClientOptions client_options_;
  const Clock::time_point t_start_ = Clock::now();
  const std::string run_id_ = RandomHex(8);  // fresh cache salt: earlier runs never hit
  DemoServer server_;
  DemoSetup setup_;
  llama_cpp::ModelPtr lm_;
  std::shared_ptr<const model::SpecPredictor> predictor_;
  std::string predictor_arithmetic_, predictor_reason_;  // with spec: LlamaPredictorChoice's
  double load_s_ = 0;
  DemoWorkload workload_;
  uint32_t n_ctx_ = 0;
  DemoArtifacts artifacts_;
  uint64_t prompt_tokens_ = 0;
  LlamaDemoRunOptions ro_;
  LlamaDemoReference reference_;
  std::vector<DemoCodecRow> rows_;
  nlohmann::json spec_bits_ = nullptr;
  nlohmann::json dckv_fit_ = nullptr;  // how dckv was fitted (JSON setup "dckv_fit")
};

}  // namespace

std::unique_ptr<DemoEngine> MakeLlamaDemo(const DemoOptions& options) {
  return std::make_unique<LlamaDemo>(options);
}

#endif  // KVSTASH_DEMO_LLAMA

}  // namespace kvstash::demo
