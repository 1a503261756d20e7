#include "demo/demo_llama_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "demo/demo_server.h"
#include "engines/llama_cpp/llama_session.h"
#include "model/forward/generate.h"

namespace kvstash::demo {
namespace {

using llama_cpp::EvalResult;
using llama_cpp::LlamaLookup;
using llama_cpp::LlamaSession;

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

// The reference answer of request i for a hit that restored `split` tokens.
Result<const LlamaDemoReference::Answer*> EnsureAnswer(llama_context* ctx, std::span<const llama_token> prompt,
                                                       size_t i, uint32_t split, uint32_t gen_tokens,
                                                       LlamaDemoReference* ref) {
  const auto key = std::pair{i, split};
  if (auto it = ref->answers.find(key); it != ref->answers.end()) return &it->second;
  const auto t0 = Clock::now();
  llama_memory_clear(llama_get_memory(ctx), true);
  if (split > 0) KVSTASH_RETURN_IF_ERROR(llama_cpp::Evaluate(ctx, prompt.first(split), 0).status());
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

}  // namespace

Result<DemoCodecRow> RunLlamaDemoCodec(llama_model* model, const DemoWorkload& w, LlamaDemoReference* ref,
                                       std::shared_ptr<const PrefixCodec> codec, std::shared_ptr<Client> client,
                                       const LlamaDemoRunOptions& o) {
  if (o.gen_tokens == 0) return Status::InvalidArgument("demo: gen_tokens must be > 0");
  const auto t_start = Clock::now();
  const bool lossy = codec->kind() == PrefixCodecKind::kDckv;
  llama_cpp::LlamaSessionOptions so;
  so.restore_cost.policy = o.restore_policy;
  KVSTASH_ASSIGN_OR_RETURN(auto session, LlamaSession::Create(model, o.params, client, codec, so));
  KVSTASH_ASSIGN_OR_RETURN(auto ref_ctx, llama_cpp::NewContext(model, o.params));
  DemoCodecRow row;
  row.codec = PrefixCodecName(codec->kind());
  row.reference = "llama.cpp full prefill";
  std::vector<double> ttft_miss, ttft_hit, ttft_declined;
  std::vector<double> h_lookup, h_network, h_store, h_predictor, h_decode, h_suffix;
  double top1 = 0, kl = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const DemoRequest& rq = w.requests[i];
    const uint32_t prefix_tokens = static_cast<uint32_t>(w.documents[rq.doc].prefix.size());
    const std::vector<llama_token> prompt = Prompt(w, rq);
    if (prompt.size() + o.gen_tokens > o.params.n_ctx) {
      return Status::InvalidArgument("demo: a prompt of " + std::to_string(prompt.size()) + " tokens + " +
                                     std::to_string(o.gen_tokens) + " generated exceeds the context (" +
                                     std::to_string(o.params.n_ctx) + ")");
    }
    ++row.requests;
    row.prompt_tokens += prompt.size();
    KVSTASH_ASSIGN_OR_RETURN(LlamaLookup lk, session->Lookup(prompt, prefix_tokens));
    const RestoreEstimate decision = session->EstimateRestore(lk, prompt.size());
    if (lk.matched_chunks == 0 || !decision.take) {
      KVSTASH_ASSIGN_OR_RETURN(EvalResult r, session->PrefillMiss(prompt, lk));
      const auto t0 = Clock::now();
      KVSTASH_RETURN_IF_ERROR(
          Generate(session->context(), std::move(r.logits), static_cast<llama_pos>(prompt.size()), 1, nullptr, nullptr)
              .status());
      const double ttft = lk.lookup_ms + r.prefill_ms + Ms(t0, Clock::now());
      // Requests arrive one after another: the miss's chunks are stored before the next.
      KVSTASH_RETURN_IF_ERROR(session->Flush().WithContext("put"));
      if (lk.matched_chunks == 0) {
        ++row.misses;
        ttft_miss.push_back(ttft);
        if (o.verbose) {
          std::fprintf(stderr, "[%s] request %zu/%zu: miss, TTFT %.0f ms (llama.cpp prefill of %zu tokens); %u chunks queued\n",
                       row.codec.c_str(), i + 1, w.requests.size(), ttft, prompt.size(), r.queued_chunks);
        }
      } else {
        ++row.declined;
        row.declined_tokens += decision.tokens;
        ttft_declined.push_back(ttft);
        row.estimates.push_back({static_cast<uint32_t>(i + 1), false, decision,
                                 r.prefill_ms * static_cast<double>(decision.tokens) / prompt.size()});
        if (o.verbose) {
          std::fprintf(stderr, "[%s] request %zu/%zu: hit of %llu tokens declined (%s), TTFT %.0f ms\n",
                       row.codec.c_str(), i + 1, w.requests.size(),
                       static_cast<unsigned long long>(decision.tokens), DecisionText(decision).c_str(), ttft);
        }
      }
      continue;
    }
    ++row.hits;
    const double store_before = ServerGetUs(client.get());
    KVSTASH_ASSIGN_OR_RETURN(EvalResult r, session->RestoreHit(prompt, lk));
    const double store_after = ServerGetUs(client.get());
    if (!r.fallback.ok()) {
      ++row.hits_mismatched;
      std::fprintf(stderr, "[%s] request %zu: the hit was not loaded, llama.cpp recomputed: %s\n", row.codec.c_str(),
                   i + 1, r.fallback.ToString().c_str());
      continue;
    }
    row.matched_tokens += r.restored_tokens;
    // The first token, then the rest of the answer (lossless) or the teacher-forced
    // reference answer (dckv), in the session's context.
    const auto t0 = Clock::now();
    const uint32_t first = model::Argmax(r.logits);
    const double first_ms = Ms(t0, Clock::now());
    const double ttft = r.lookup_ms + r.restore_ms + r.prefill_ms + first_ms;
    KVSTASH_ASSIGN_OR_RETURN(const LlamaDemoReference::Answer* want,
                             EnsureAnswer(ref_ctx.get(), prompt, i, r.restored_tokens, o.gen_tokens, ref));
    bool verified = true;
    const auto pos = static_cast<llama_pos>(prompt.size());
    if (!lossy) {
      KVSTASH_ASSIGN_OR_RETURN(auto answer, Generate(session->context(), r.logits, pos, o.gen_tokens, nullptr, nullptr));
      const bool same_answer = answer == want->tokens;
      row.same_tokens_as_fp32 += same_answer;
      verified = first == want->tokens[0] && same_answer && SameFloats(r.logits, want->last_logits);
    } else {
      std::vector<float> logits;
      KVSTASH_RETURN_IF_ERROR(Generate(session->context(), r.logits, pos, o.gen_tokens, &want->tokens, &logits).status());
      const size_t V = r.logits.size();
      for (size_t g = 0; g * V < logits.size(); ++g) {
        ScorePosition(std::span(logits).subspan(g * V, V), want->logprobs.data() + g * V, want->tokens[g], &top1, &kl);
        ++row.scored_positions;
      }
    }
    const double store_ms = store_before >= 0 && store_after >= 0 ? (store_after - store_before) / 1000.0 : 0.0;
    ttft_hit.push_back(ttft);
    row.estimates.push_back({static_cast<uint32_t>(i + 1), true, r.estimate, r.restore_ms});
    h_lookup.push_back(r.lookup_ms);
    h_network.push_back(std::max(0.0, r.get_ms - store_ms));
    h_store.push_back(store_ms);
    h_predictor.push_back(r.predictor_ms);
    h_decode.push_back(r.decode_ms - r.predictor_ms + r.import_ms);
    h_suffix.push_back(r.prefill_ms + first_ms);
    verified ? ++row.hits_verified : ++row.hits_mismatched;
    if (o.verbose) {
      std::fprintf(stderr,
                   "[%s] request %zu/%zu: hit %u/%u prefix tokens, TTFT %.0f ms (restore %.0f: get %.0f, predictor %.0f, "
                   "decode %.0f, import %.0f; llama.cpp prefill of %u tokens %.0f; %s)%s\n",
                   row.codec.c_str(), i + 1, w.requests.size(), r.restored_tokens, prefix_tokens, ttft, r.restore_ms,
                   r.get_ms, r.predictor_ms, r.decode_ms - r.predictor_ms, r.import_ms, r.evaluated_tokens,
                   r.prefill_ms, DecisionText(r.estimate).c_str(),
                   lossy ? "" : (verified ? " logit-identical, same answer" : " MISMATCH"));
    }
  }
  KVSTASH_RETURN_IF_ERROR(session->Flush().WithContext("put"));
  const llama_cpp::LlamaSessionStats st = session->stats();
  row.raw_bytes = st.put_raw_bytes;
  row.stored_bytes = st.put_payload_bytes;
  FinishTtfts(ttft_miss, ttft_hit, ttft_declined, &row);
  if (row.misses) {
    row.encode_ms = st.encode_ms / row.misses;
    row.put_ms = st.put_ms / row.misses;
  }
  row.hit = {Median(h_lookup), Median(h_network), Median(h_store), Median(h_predictor), Median(h_decode),
             Median(h_suffix)};
  if (lossy && row.scored_positions) {
    row.top1_agreement = top1 / row.scored_positions;
    row.kl_mean = kl / row.scored_positions;
  }
  row.wall_s = Secs(t_start);
  return row;
}

}  // namespace kvstash::demo
