// `kvstash bench prefill`: prefill throughput of the reference runtime (model/) on
// real text, at several prompt lengths. Each row: tokens, BLAS threads, median
// seconds and tokens/s over --reps runs, and the process's peak RSS. The forward pass
// exports the full KV cache (and the last row of logits), as a cache producer does.
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

namespace kvstash::cli {
namespace {

struct BenchPrefillOptions {
  std::string model = DefaultModelPath();
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string json;
  std::vector<uint32_t> lengths = {128, 512, 2048};
  int reps = 3, threads = 0;
};

int Fail(const Status& s) {
  std::cerr << "kvstash bench prefill: " << s.ToString() << "\n";
  return 1;
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
  nlohmann::json rows = nlohmann::json::array();
  std::cout << "model " << m.config.ToString() << "\ntext " << o.text << " (" << tokens->size() << " tokens)\n";
  std::cout << "tokens  threads  median_s  tokens/s  peak_rss_MiB\n";
  for (uint32_t n : o.lengths) {
    if (n == 0 || n > tokens->size()) {
      return Fail(Status::InvalidArgument("length " + std::to_string(n) + " is 0 or exceeds the text's " +
                                          std::to_string(tokens->size()) + " tokens"));
    }
    std::vector<double> secs;
    for (int r = 0; r < std::max(1, o.reps); ++r) {
      model::KvCache cache = model::KvCache::ForModel(m.config);
      const auto t0 = std::chrono::steady_clock::now();
      auto res = model::Prefill(m, std::span(*tokens).first(n), &cache);
      const auto t1 = std::chrono::steady_clock::now();
      if (!res.ok()) return Fail(res.status());
      if (cache.tokens != n) return Fail(Status::Internal("prefill returned a short cache"));
      secs.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::sort(secs.begin(), secs.end());
    const double med = secs[secs.size() / 2];
    const double rss = PeakRssMiB();
    std::printf("%6u  %7d  %8.3f  %8.1f  %12.1f\n", n, threads, med, n / med, rss);
    rows.push_back({{"model", o.model}, {"tokens", n}, {"threads", threads}, {"reps", secs.size()},
                    {"median_s", med}, {"tokens_per_s", n / med}, {"peak_rss_mib", rss},
                    {"kv_bytes_bf16", m.config.n_layers * 2ull * m.config.kv_dim() * 2ull * n}});
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
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
