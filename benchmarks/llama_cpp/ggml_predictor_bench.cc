// kvstash_ggml_predictor_bench: the ggml-q4_1 spec predictor's time beside llama.cpp's
// own prefill of the same tokens with the same thread count (the predictor runs on both
// the encoder and the decoder, so its cost is counted in units of the prefill it
// replaces).
//
// One document of --tokens tokens from the evaluation corpus (model/corpus/text_corpus.h)
// is prefilled --reps times by each side, alternating, so that load from other
// processes falls on both:
//   - llama.cpp (libllama of llama-cpp-python 0.3.36): a fresh context (flash attention
//     off, f16 KV, n_batch = n_ctx = tokens, --threads threads) evaluates the tokens in
//     one batch (llama_cpp::Evaluate; context creation is not timed);
//   - the predictor (SpecPredictorOptions::kGgml, f16 KV, or kInt with --predictor int;
//     --threads threads, the backend KVSTASH_CPU_PATH allows) runs the same tokens into an empty
//     PredictorCache.
// Reports the median wall-clock seconds of each, tokens/s and ratio = predictor /
// llama.cpp, the same for process CPU seconds (CLOCK_PROCESS_CPUTIME_ID: less
// disturbed than wall-clock time on a loaded machine), and
// the predictor cache's digest (PredictorCacheDigest), which must not depend on the
// backend or the thread count. Prints one JSON object to stdout.
//
// --predictor int times the int arithmetic (W8A16-g128) instead: the one that runs models
// the ggml arithmetic refuses (Qwen2.5-Coder's biases and K-quant blocks).
//
// Usage: kvstash_ggml_predictor_bench [--model GGUF] [--tokens N] [--threads N] [--reps R]
//                                     [--predictor ggml|int]
// Defaults: models/SmolLM2-135M-Instruct.Q4_1.gguf under the source tree, 512, 1, 5, ggml.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cpu_path.h"
#include "engines/llama_cpp/llama_engine.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall_s = 0, cpu_s = 0;
};

template <typename F>
Result<Timing> Measure(F f) {
  const double c0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  KVSTASH_RETURN_IF_ERROR(f());
  return Timing{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                ProcessCpuSeconds() - c0};
}

int Main(int argc, char** argv) {
  std::string model_path = std::string(KVSTASH_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  uint32_t tokens = 512;
  int threads = 1, reps = 5;
  std::string arithmetic = "ggml";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model_path = v;
    else if (a == "--tokens") tokens = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--predictor")
      arithmetic = v;
    else {
      std::cerr << "unknown flag " << a << "\n";
      return 2;
    }
  }
  if (argc % 2 == 0 || tokens == 0 || threads < 1 || reps < 1 ||
      (arithmetic != "ggml" && arithmetic != "int")) {
    std::cerr << "usage: kvstash_ggml_predictor_bench [--model GGUF] [--tokens N] [--threads N] [--reps R] "
                 "[--predictor ggml|int]\n";
    return 2;
  }
  auto fail = [](const Status& s) {
    std::cerr << "kvstash_ggml_predictor_bench: " << s.ToString() << "\n";
    return 1;
  };
  llama_cpp::InitLlamaBackend();
  auto m = model::LoadModel(model_path);
  if (!m.ok()) return fail(m.status());
  if (!(*m)->tokenizer) return fail(Status::InvalidArgument("model has no tokenizer"));
  model::SpecPredictorOptions po;
  po.arithmetic = arithmetic == "int" ? model::SpecPredictorOptions::Arithmetic::kInt
                                      : model::SpecPredictorOptions::Arithmetic::kGgml;
  po.threads = threads;
  auto predictor = model::SpecPredictor::Create(**m, po);
  if (!predictor.ok()) return fail(predictor.status());
  auto lm = llama_cpp::LoadModel(model_path);
  if (!lm.ok()) return fail(lm.status());
  auto corpus = model::LoadCorpus(*(*m)->tokenizer, model::CorpusSplit::kEvaluation, tokens, tokens);
  if (!corpus.ok()) return fail(corpus.status());
  if (corpus->documents.empty() || corpus->documents[0].tokens.size() != tokens) {
    return fail(Status::InvalidArgument("the evaluation corpus has no document of " + std::to_string(tokens) +
                                        " tokens"));
  }
  const std::vector<uint32_t>& ids = corpus->documents[0].tokens;
  const std::vector<llama_token> llama_ids(ids.begin(), ids.end());
  auto params = llama_cpp::ContextParams(tokens, threads, false, DType::kF16);
  if (!params.ok()) return fail(params.status());

  std::vector<double> llama_s, pred_s, llama_cpu_s, pred_cpu_s;
  uint64_t digest = 0;
  for (int r = 0; r < reps; ++r) {
    auto ctx = llama_cpp::NewContext(lm->get(), *params);
    if (!ctx.ok()) return fail(ctx.status());
    auto ls = Measure([&] { return llama_cpp::Evaluate(ctx->get(), llama_ids, 0).status(); });
    if (!ls.ok()) return fail(ls.status());
    llama_s.push_back(ls->wall_s);
    llama_cpu_s.push_back(ls->cpu_s);
    model::PredictorCache cache;
    auto ps = Measure([&] { return (*predictor)->Run(ids, &cache); });
    if (!ps.ok()) return fail(ps.status());
    pred_s.push_back(ps->wall_s);
    pred_cpu_s.push_back(ps->cpu_s);
    digest = model::PredictorCacheDigest(cache);
  }
  const double lmed = Median(llama_s), pmed = Median(pred_s);
  const double lcpu = Median(llama_cpu_s), pcpu = Median(pred_cpu_s);
  nlohmann::json out{{"model", model_path},
                     {"predictor", po.VariantName()},
                     {"cpu_path", CpuPathName()},
                     {"tokens", tokens},
                     {"threads", threads},
                     {"reps", reps},
                     {"llama_cpp", "llama-cpp-python 0.3.36, flash attention off, f16 KV, one batch"},
                     {"llama_prefill_median_s", lmed},
                     {"predictor_median_s", pmed},
                     {"llama_prefill_tokens_per_s", tokens / lmed},
                     {"predictor_tokens_per_s", tokens / pmed},
                     {"predictor_vs_llama_prefill", pmed / lmed},
                     {"llama_prefill_cpu_median_s", lcpu},
                     {"predictor_cpu_median_s", pcpu},
                     {"predictor_vs_llama_prefill_cpu", pcpu / lcpu},
                     {"llama_prefill_s", llama_s},
                     {"predictor_s", pred_s},
                     {"predictor_digest", digest}};
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace kvstash

int main(int argc, char** argv) { return kvstash::Main(argc, argv); }
