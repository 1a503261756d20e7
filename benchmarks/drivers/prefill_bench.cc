// The driver of `kvstash-bench prefill` (prefill_bench.h): prefill throughput of the reference runtime (model/) on
#include "benchmarks/drivers/prefill_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "model/formats/model_loader.h"
#include "model/forward/linear.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::bench {
namespace {

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

}  // namespace

Result<nlohmann::json> RunPrefillBench(const PrefillBenchOptions& o, const PrefillBenchObserver& observer) {
  const int threads = model::SetBlasThreads(o.threads);
  auto loaded = model::LoadModel(o.model);
  if (!loaded.ok()) return (loaded.status());
  const model::Model& m = **loaded;
  if (m.tokenizer == nullptr) return (Status::InvalidArgument("the model has no tokenizer"));
  std::ifstream in(o.text);
  if (!in) return (Status::IOError("cannot read " + o.text));
  std::stringstream ss;
  ss << in.rdbuf();
  auto tokens = m.tokenizer->Encode(ss.str());
  if (!tokens.ok()) return (tokens.status());
  std::unique_ptr<model::SpecPredictor> predictor;
  if (o.predictor) {
    model::SpecPredictorOptions po;
    po.group = o.predictor_group;
    po.activation_bits = o.predictor_activation_bits;
    if (o.predictor_int8_attention) po.attention = model::SpecPredictorOptions::Attention::kInt8;
    po.threads = threads;
    auto p = model::SpecPredictor::Create(m, po);
    if (!p.ok()) return (p.status());
    predictor = std::move(p).value();
  }
  nlohmann::json rows = nlohmann::json::array();
  if (observer.on_start) {
    observer.on_start(m.config.ToString(), tokens->size(),
                      predictor ? predictor->options().VariantName() : std::string(), threads);
  }
  for (uint32_t n : o.lengths) {
    if (n == 0 || n > tokens->size()) {
      return (Status::InvalidArgument("length " + std::to_string(n) + " is 0 or exceeds the text's " +
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
      if (!res.ok()) return (res.status());
      if (cache.tokens != n) return (Status::Internal("prefill returned a short cache"));
      secs.push_back(std::chrono::duration<double>(t1 - t0).count());
      cpu.push_back(ProcessCpuSeconds() - c0);
      if (predictor) {
        model::PredictorCache pc;
        model::PredictorProfile prof;
        const double pc0 = ProcessCpuSeconds();
        const auto p0 = std::chrono::steady_clock::now();
        const Status st = predictor->Run(std::span(*tokens).first(n), &pc, o.profile ? &prof : nullptr);
        const auto p1 = std::chrono::steady_clock::now();
        if (!st.ok()) return (st);
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
    if (predictor) {
      std::sort(pred.begin(), pred.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      const auto& [pmed, prof] = pred[pred.size() / 2];
      row["predictor"] = predictor->options().VariantName();
      row["predictor_median_s"] = pmed;
      row["predictor_tokens_per_s"] = n / pmed;
      row["predictor_cost_vs_prefill"] = pmed / med;
      // CPU seconds (all threads): less sensitive to other load on the machine than
      // wall time, but counts any spinning of BLAS worker threads.
      const double cpu_med = Median(cpu), pred_cpu_med = Median(pred_cpu);
      row["cpu_median_s"] = cpu_med;
      row["predictor_cpu_median_s"] = pred_cpu_med;
      row["predictor_cpu_cost_vs_prefill"] = pred_cpu_med / cpu_med;
      if (o.profile) {
        row["predictor_profile_s"] = {{"quantize", prof.quantize_s}, {"gemm", prof.gemm_s},
                                      {"attention", prof.attention_s}, {"norm_rope", prof.norm_rope_s},
                                      {"other", prof.other_s}};
      }
    }
    if (observer.on_row) observer.on_row(row);
    rows.push_back(row);
  }
  return rows;
}


}  // namespace kvstash::bench
