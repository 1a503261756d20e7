#include "demo/demo_llama_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "demo/demo_session_pass.h"
#include "engines/llama_cpp/llama_kv_engine.h"
#include "engines/session/prefix_chunk_codec.h"
#include "model/forward/generate.h"

namespace kvstash::demo {
namespace {

std::vector<llama_token> Prompt(const DemoWorkload& w, const DemoRequest& r) {
  const auto& prefix = w.documents[r.doc].prefix;
  std::vector<llama_token> p(prefix.begin(), prefix.end());
  p.insert(p.end(), r.question_tokens.begin(), r.question_tokens.end());
  return p;
}

// Greedy answer of `n` tokens in `ctx`, whose sequence 0 holds the prompt's `pos`
// positions and whose last logits are `logits`. With `teacher` the given tokens are fed
// instead of the argmax (teacher forcing) and every position's logits are appended to
// *all_logits ([n, vocab]).
Result<std::vector<uint32_t>> Generate(llama_context* ctx, std::vector<float> logits, llama_pos pos, uint32_t n,
                                       const std::vector<uint32_t>* teacher, std::vector<float>* all_logits) {
  std::vector<uint32_t> out;
  for (uint32_t g = 0; g < n; ++g) {
    if (all_logits) all_logits->insert(all_logits->end(), logits.begin(), logits.end());
    const uint32_t tok = teacher ? (*teacher)[g] : model::Argmax(logits);
    out.push_back(tok);
    if (g + 1 == n) break;
    const llama_token t = static_cast<llama_token>(tok);
    KVSTASH_ASSIGN_OR_RETURN(logits, llama_cpp::Evaluate(ctx, std::span(&t, 1), pos++));
  }
  return out;
}

// The reference answer of request i for a hit that restored `split` tokens. The
// prefix's KV comes from `producer` (the prompt whose miss stored it) prefilled in one
// batch and cut back to `split` positions, as llama.cpp would hold it had it kept that
// cache; without a producer sharing the prefix, from a prefill of the prefix alone.
// (With repacked blocks, e.g. Q4_K/Q6_K/Q8_0 on x86, ggml multiplies rows in groups
// of 4 and the rest one by one, with other roundings, so a token's KV depends on its
// place in the batch: a prefill of the prefix alone may differ from the miss's in its
// last rows. Q4_1, SmolLM2's, is not repacked.)
Result<const LlamaDemoReference::Answer*> EnsureAnswer(llama_context* ctx,
                                                       std::span<const llama_token> prompt,
                                                       std::span<const llama_token> producer, size_t i,
                                                       uint32_t split, uint32_t gen_tokens,
                                                       LlamaDemoReference* ref) {
  const auto key = std::pair{i, split};
  if (auto it = ref->answers.find(key); it != ref->answers.end()) return &it->second;
  const auto t0 = Clock::now();
  llama_memory_t mem = llama_get_memory(ctx);
  llama_memory_clear(mem, true);
  const bool from_producer = split > 0 && producer.size() >= split && prompt.size() >= split &&
                             std::equal(producer.begin(), producer.begin() + split, prompt.begin());
  if (from_producer) {
    KVSTASH_RETURN_IF_ERROR(llama_cpp::Evaluate(ctx, producer, 0).status());
    if (!llama_memory_seq_rm(mem, 0, static_cast<llama_pos>(split), -1)) {
      return Status::Internal("llama.cpp could not cut the reference cache back to " + std::to_string(split) +
                              " positions");
    }
  } else if (split > 0) {
    KVSTASH_RETURN_IF_ERROR(llama_cpp::Evaluate(ctx, prompt.first(split), 0).status());
  }
  LlamaDemoReference::Answer a;
  KVSTASH_ASSIGN_OR_RETURN(a.last_logits, llama_cpp::Evaluate(ctx, prompt.subspan(split), static_cast<llama_pos>(split)));
  std::vector<float> logits;
  KVSTASH_ASSIGN_OR_RETURN(a.tokens, Generate(ctx, a.last_logits, static_cast<llama_pos>(prompt.size()), gen_tokens,
                                              nullptr, &logits));
  const size_t V = a.last_logits.size();
  a.logprobs.resize(logits.size());
  for (size_t g = 0; g * V < logits.size(); ++g) {
    LogSoftmax(std::span(logits).subspan(g * V, V), a.logprobs.data() + g * V);
  }
  ref->wall_s += Secs(t0);
  return &ref->answers.emplace(key, std::move(a)).first->second;
}

bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// llama.cpp's checks of a pass (see the top): every hit against a fresh context's
// answer for the same batch split.
class LlamaChecks final : public SessionPassChecks {
 public:
  LlamaChecks(const DemoWorkload& w, LlamaDemoReference* ref, llama_cpp::LlamaKvEngine* engine,
              llama_cpp::ContextPtr ref_ctx, bool lossy, uint32_t gen_tokens)
      : w_(w),
        ref_(*ref),
        engine_(*engine),
        ref_ctx_(std::move(ref_ctx)),
        lossy_(lossy),
        gen_tokens_(gen_tokens) {}

  Status AfterPrefill(size_t) override { return Status::Ok(); }

  Result<bool> CheckHit(size_t i, const session::EvalResult& r, DemoCodecRow* row, double* top1,
                        double* kl) override {
    const std::vector<llama_token> prompt = Prompt(w_, w_.requests[i]);
    // The document's first request was its miss, whose prefill stored the prefix.
    std::vector<llama_token> producer;
    for (size_t j = 0; j < i; ++j) {
      if (w_.requests[j].doc == w_.requests[i].doc) {
        producer = Prompt(w_, w_.requests[j]);
        break;
      }
    }
    KVSTASH_ASSIGN_OR_RETURN(
        const LlamaDemoReference::Answer* want,
        EnsureAnswer(ref_ctx_.get(), prompt, producer, i, r.restored_tokens, gen_tokens_, &ref_));
    // The rest of the answer (lossless) or the teacher-forced reference answer (dckv),
    // in the session's context.
    const auto pos = static_cast<llama_pos>(prompt.size());
    if (!lossy_) {
      KVSTASH_ASSIGN_OR_RETURN(auto answer,
                               Generate(engine_.context(), r.logits, pos, gen_tokens_, nullptr, nullptr));
      const bool same_answer = answer == want->tokens;
      row->same_tokens_as_fp32 += same_answer;
      return model::Argmax(r.logits) == want->tokens[0] && same_answer &&
             SameFloats(r.logits, want->last_logits);
    }
    std::vector<float> logits;
    KVSTASH_RETURN_IF_ERROR(
        Generate(engine_.context(), r.logits, pos, gen_tokens_, &want->tokens, &logits).status());
    const size_t V = r.logits.size();
    for (size_t g = 0; g * V < logits.size(); ++g) {
      ScorePosition(std::span(logits).subspan(g * V, V), want->logprobs.data() + g * V, want->tokens[g], top1,
                    kl);
      ++row->scored_positions;
    }
    return true;
  }

 private:
  const DemoWorkload& w_;
  LlamaDemoReference& ref_;
  llama_cpp::LlamaKvEngine& engine_;
  llama_cpp::ContextPtr ref_ctx_;
  bool lossy_;
  uint32_t gen_tokens_;
};

}  // namespace

Result<DemoCodecRow> RunLlamaDemoCodec(llama_model* model, const DemoWorkload& w, LlamaDemoReference* ref,
                                       std::shared_ptr<const PrefixCodec> codec,
                                       std::shared_ptr<Client> client, const LlamaDemoRunOptions& o) {
  if (o.gen_tokens == 0) return Status::InvalidArgument("demo: gen_tokens must be > 0");
  KVSTASH_ASSIGN_OR_RETURN(auto engine, llama_cpp::LlamaKvEngine::Create(model, o.params, 0));
  KVSTASH_ASSIGN_OR_RETURN(auto ref_ctx, llama_cpp::NewContext(model, o.params));
  LlamaChecks checks(w, ref, engine.get(), std::move(ref_ctx), codec->kind() == PrefixCodecKind::kDckv,
                     o.gen_tokens);
  return RunSessionPass(std::move(engine),
                        std::make_shared<const session::PrefixChunkCodec>(std::move(codec)),
                        std::move(client), w, &checks,
                        {o.gen_tokens, o.verbose, o.restore_policy, "llama.cpp", "llama.cpp full prefill",
                         "logit-identical, same answer"});
}

}  // namespace kvstash::demo
