// `kvstash generate`: greedy continuation of a prompt with the reference runtime
// (model/), for any model format LoadModel reads. Prints the continuation text to
// stdout; with --ids also the prompt and generated token ids; timing to stderr.
#include <chrono>
#include <iostream>

#include "cli/command_registry.h"
#include "model/forward/generate.h"
#include "model/forward/linear.h"
#include "model/formats/model_loader.h"

namespace kvstash::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer, prompt;
  uint32_t n = 32;
  int threads = 0;
  bool ids = false, ignore_eos = false;
};

int Fail(const Status& s) {
  std::cerr << "kvstash generate: " << s.ToString() << "\n";
  return 1;
}

int Run(const GenerateOptions& o) {
  model::SetBlasThreads(o.threads);
  model::LoadOptions lo;
  lo.tokenizer_path = o.tokenizer;
  auto t0 = std::chrono::steady_clock::now();
  auto loaded = model::LoadModel(o.model, lo);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::Model& m = **loaded;
  if (m.tokenizer == nullptr) {
    return Fail(Status::InvalidArgument("the model file has no tokenizer: pass --tokenizer FILE"));
  }
  auto prompt = m.tokenizer->Encode(o.prompt);
  if (!prompt.ok()) return Fail(prompt.status());
  if (prompt->empty()) return Fail(Status::InvalidArgument("the prompt encodes to no tokens"));
  auto t1 = std::chrono::steady_clock::now();
  model::KvCache cache = model::KvCache::ForModel(m.config);
  model::GenerateOptions go;
  go.max_new_tokens = o.n;
  go.stop_at_eos = !o.ignore_eos;
  auto out = model::GenerateGreedy(m, *prompt, &cache, go);
  if (!out.ok()) return Fail(out.status());
  auto t2 = std::chrono::steady_clock::now();
  // Decode prompt+continuation and print the difference, so that tokenizers whose
  // pieces depend on context (SentencePiece's leading space) print the right text.
  std::vector<uint32_t> all = *prompt;
  all.insert(all.end(), out->begin(), out->end());
  auto full = m.tokenizer->Decode(all);
  auto head = m.tokenizer->Decode(*prompt);
  if (!full.ok() || !head.ok()) return Fail(!full.ok() ? full.status() : head.status());
  std::cout << full->substr(std::min(head->size(), full->size())) << "\n";
  if (o.ids) {
    std::cout << "prompt_ids:";
    for (uint32_t id : *prompt) std::cout << ' ' << id;
    std::cout << "\ngenerated_ids:";
    for (uint32_t id : *out) std::cout << ' ' << id;
    std::cout << "\n";
  }
  const double load_s = std::chrono::duration<double>(t1 - t0).count();
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  std::cerr << "model " << m.config.ToString() << " (" << m.source << "); load " << load_s << " s; "
            << prompt->size() << " prompt tokens + " << out->size() << " generated in " << gen_s << " s ("
            << model::BlasThreads() << " BLAS threads)\n";
  return 0;
}

const bool kRegistered = RegisterCommand(
    "generate", "Greedy continuation of a prompt with the reference runtime (GGUF, safetensors, llama2.c)",
    [](CLI::App* cmd) {
      auto o = std::make_shared<GenerateOptions>();
      cmd->add_option("--model", o->model, "Model file (GGUF, llama2.c .bin) or safetensors directory")->required();
      cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer file (llama2.c tokenizer.bin or a GGUF)");
      cmd->add_option("--prompt", o->prompt, "Prompt text")->required();
      cmd->add_option("-n", o->n, "Tokens to generate")->capture_default_str();
      cmd->add_option("--threads", o->threads, "BLAS threads (0: library default)")->capture_default_str();
      cmd->add_flag("--ids", o->ids, "Also print prompt and generated token ids");
      cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at the end-of-sequence token");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
