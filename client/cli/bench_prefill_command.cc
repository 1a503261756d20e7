// `kvstash bench prefill`: prefill throughput of the reference runtime (model/) on
// real text, at several prompt lengths. Each row: tokens, BLAS threads, median
// seconds and tokens/s over --reps runs, and the process's peak RSS. The forward pass
// exports the full KV cache (and the last row of logits), as a cache producer does.
//
// --predictor also runs the spec codec's deterministic predictor (model/spec_predictor.h,
// --predictor-group / --predictor-activation-bits, as many threads as BLAS) on the same
// tokens, alternating with the prefill runs so both see the same machine load, and adds
// its median seconds, tokens/s and cost = predictor median / prefill median (the figure
// that decides whether a spec hit beats recomputing), and the same ratio in process
// CPU seconds (robust to other load; use --threads 1). --profile adds the predictor's
// per-step split (quantise, int GEMM, attention, norm + RoPE, other) of the median run.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "client/cli/default_paths.h"
#include "client/cli/command_registry.h"
#include "model/linear.h"
#include "model/model_loader.h"
#include "model/prefill.h"
#include "model/spec_predictor.h"

namespace kvstash::cli {
namespace {

struct BenchPrefillOptions {
  std::string model = DefaultModelPath();
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string json;
  std::vector<uint32_t> lengths = {128, 512, 2048};
  int reps = 3, threads = 0;
  bool predictor = false, profile = false;
  int predictor_group = 128, predictor_activation_bits = 16;
};

int Fail(const Status& s) {
  std::cerr << "kvstash bench prefill: " << s.ToString() << "\n";
  return 1;
}

// User + system CPU seconds of the whole process so far (all threads).
double ProcessCpuSeconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double PeakRssMiB() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

int Run(const BenchPrefillOptions& o) {
  const int threads = model::SetBlasThreads(o.threads);
  auto loaded = model::LoadModel(o.model);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::Model& m = **loaded;
  if (m.tokenizer == nullptr) return Fail(Status::InvalidArgument("the model has no tokenizer"));
  std::ifstream in(o.text);
  if (!in) return Fail(Status::IOError("cannot read " + o.text));
  std::stringstream ss;
  ss << in.rdbuf();
  auto tokens = m.tokenizer->Encode(ss.str());
  if (!tokens.ok()) return Fail(tokens.status());
  std::unique_ptr<model::SpecPredictor> predictor;
  if (o.predictor) {
    model::SpecPredictorOptions po;
    po.group = o.predictor_group;
    po.activation_bits = o.predictor_activation_bits;
    po.threads = threads;
    auto p = model::SpecPredictor::Create(m, po);
    if (!p.ok()) return Fail(p.status());
    predictor = std::move(p).value();
  }
  nlohmann::json rows = nlohmann::json::array();
  std::cout << "model " << m.config.ToString() << "\ntext " << o.text << " (" << tokens->size() << " tokens)\n";
  if (predictor) std::cout << "predictor " << predictor->options().VariantName() << ", " << threads << " threads\n";
  std::cout << "tokens  threads  median_s  tokens/s  peak_rss_MiB"
            << (predictor ? "  pred_median_s  pred_tokens/s  pred_cost" : "") << "\n";
  for (uint32_t n : o.lengths) {
    if (n == 0 || n > tokens->size()) {
      return Fail(Status::InvalidArgument("length " + std::to_string(n) + " is 0 or exceeds the text's " +
                                          std::to_string(tokens->size()) + " tokens"));
    }
    std::vector<double> secs, cpu, pred_cpu;
    std::vector<std::pair<double, model::PredictorProfile>> pred;  // (seconds, split)
    for (int r = 0; r < std::max(1, o.reps); ++r) {
      model::KvCache cache = model::KvCache::ForModel(m.config);
      const double c0 = ProcessCpuSeconds();
      const auto t0 = std::chrono::steady_clock::now();
      auto res = model::Prefill(m, std::span(*tokens).first(n), &cache);
      const auto t1 = std::chrono::steady_clock::now();
      if (!res.ok()) return Fail(res.status());
      if (cache.tokens != n) return Fail(Status::Internal("prefill returned a short cache"));
      secs.push_back(std::chrono::duration<double>(t1 - t0).count());
      cpu.push_back(ProcessCpuSeconds() - c0);
      if (predictor) {
        model::PredictorCache pc;
        model::PredictorProfile prof;
        const double pc0 = ProcessCpuSeconds();
        const auto p0 = std::chrono::steady_clock::now();
        const Status st = predictor->Run(std::span(*tokens).first(n), &pc, o.profile ? &prof : nullptr);
        const auto p1 = std::chrono::steady_clock::now();
        if (!st.ok()) return Fail(st);
        pred.emplace_back(std::chrono::duration<double>(p1 - p0).count(), prof);
        pred_cpu.push_back(ProcessCpuSeconds() - pc0);
      }
    }
    std::sort(secs.begin(), secs.end());
    const double med = secs[secs.size() / 2];
    const double rss = PeakRssMiB();
    nlohmann::json row = {{"model", o.model}, {"tokens", n}, {"threads", threads}, {"reps", secs.size()},
                          {"median_s", med}, {"tokens_per_s", n / med}, {"peak_rss_mib", rss},
                          {"kv_bytes_bf16", m.config.n_layers * 2ull * m.config.kv_dim() * 2ull * n}};
    std::printf("%6u  %7d  %8.3f  %8.1f  %12.1f", n, threads, med, n / med, rss);
    if (predictor) {
      std::sort(pred.begin(), pred.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      const auto& [pmed, prof] = pred[pred.size() / 2];
      std::printf("  %13.3f  %13.1f  %9.3f", pmed, n / pmed, pmed / med);
      row["predictor"] = predictor->options().VariantName();
      row["predictor_median_s"] = pmed;
      row["predictor_tokens_per_s"] = n / pmed;
      row["predictor_cost_vs_prefill"] = pmed / med;
      // CPU seconds (all threads): less sensitive to other load on the machine than
      // wall time, but counts any spinning of BLAS worker threads.
      const double cpu_med = Median(cpu), pred_cpu_med = Median(pred_cpu);
      std::printf("\n        CPU seconds (median): prefill %.3f, predictor %.3f, ratio %.3f", cpu_med, pred_cpu_med,
                  pred_cpu_med / cpu_med);
      row["cpu_median_s"] = cpu_med;
      row["predictor_cpu_median_s"] = pred_cpu_med;
      row["predictor_cpu_cost_vs_prefill"] = pred_cpu_med / cpu_med;
      if (o.profile) {
        std::printf("\n        predictor split (median run): quantise %.3f s, int GEMM %.3f s, attention %.3f s, "
                    "norm+RoPE %.3f s, other %.3f s",
                    prof.quantize_s, prof.gemm_s, prof.attention_s, prof.norm_rope_s, prof.other_s);
        row["predictor_profile_s"] = {{"quantize", prof.quantize_s}, {"gemm", prof.gemm_s},
                                      {"attention", prof.attention_s}, {"norm_rope", prof.norm_rope_s},
                                      {"other", prof.other_s}};
      }
    }
    std::printf("\n");
    std::fflush(stdout);
    rows.push_back(row);
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << rows.dump(1) << "\n";
    if (!out) return Fail(Status::IOError("cannot write " + o.json));
  }
  return 0;
}

const bool kRegistered = RegisterCommand(
    "bench prefill", "Prefill tokens/s of the reference runtime on real text (128/512/2048 tokens)",
    [](CLI::App* cmd) {
      auto o = std::make_shared<BenchPrefillOptions>();
      cmd->add_option("--model", o->model, "Model file")->capture_default_str();
      cmd->add_option("--text", o->text, "UTF-8 text to take the prompt tokens from")->capture_default_str();
      cmd->add_option("--lengths", o->lengths, "Prompt lengths in tokens")->capture_default_str();
      cmd->add_option("--reps", o->reps, "Runs per length (median reported)")->capture_default_str();
      cmd->add_option("--threads", o->threads, "BLAS threads (0: library default)")->capture_default_str();
      cmd->add_option("--json", o->json, "Write rows to FILE as JSON");
      cmd->add_flag("--predictor", o->predictor,
                    "Also time the spec predictor on the same tokens (cost = predictor / prefill)");
      cmd->add_flag("--profile", o->profile, "With --predictor: the predictor's per-step split");
      cmd->add_option("--predictor-group", o->predictor_group, "Predictor quantisation group (0: per row)")
          ->capture_default_str();
      cmd->add_option("--predictor-activation-bits", o->predictor_activation_bits,
                      "Predictor activation bits (8 or 16)")
          ->capture_default_str();
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
