#include "demo/demo_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>

#include <nlohmann/json.hpp>

#include "demo/demo_server.h"
#include "demo/demo_session_pass.h"
#include "engines/reference/reference_engine.h"
#include "engines/session/prefix_chunk_codec.h"
#include "model/forward/generate.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"

namespace kvstash::demo {

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

int Fail(const std::string& command, const std::string& what, const Status& s) {
  std::fprintf(stderr, "%s: %s: %s\n", command.c_str(), what.c_str(), s.ToString().c_str());
  if (const std::string note = StartedServerExitNote(); !note.empty()) {
    std::fprintf(stderr, "%s: %s\n", command.c_str(), note.c_str());
  }
  return 1;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double DemoHitEstimate::error() const {
  if (!estimate.informed || measured_ms <= 0) return -1;
  const double forecast_ms = 1e3 * (taken ? estimate.restore_s : estimate.recompute_s);
  return std::abs(forecast_ms - measured_ms) / measured_ms;
}

double DemoCodecRow::median_estimate_error() const {
  std::vector<double> errors;
  for (const DemoHitEstimate& e : estimates) {
    if (e.error() >= 0) errors.push_back(e.error());
  }
  return errors.empty() ? -1 : Median(errors);
}

std::string DemoPassTally::SoFar() const {
  std::string out;
  const auto add = [&out](const char* what, const std::vector<double>& v) {
    if (v.empty()) return;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.0f ms (n=%zu)", out.empty() ? " | so far: " : ", ", what,
                  Median(v), v.size());
    out += buf;
  };
  add("hits", ttft_hit);
  add("misses", ttft_miss);
  return out;
}

void DemoPassTally::Finish(bool lossy, DemoCodecRow* row) const {
  row->ttft_miss_ms = Median(ttft_miss);
  row->ttft_hit_ms = Median(ttft_hit);
  row->ttft_declined_ms = Median(ttft_declined);
  row->hits_slower_than_miss = 0;
  if (!ttft_miss.empty()) {
    for (double t : ttft_hit) row->hits_slower_than_miss += t > row->ttft_miss_ms;
  }
  if (lossy && row->scored_positions) {
    row->top1_agreement = top1 / row->scored_positions;
    row->kl_mean = kl / row->scored_positions;
  }
}

std::string DecisionText(const RestoreEstimate& e) {
  if (!e.informed) return e.take ? "no rates yet, restore policy always" : "no rates yet: declined";
  char b[160];
  std::snprintf(b, sizeof b, "restore est %.0f ms %s recompute est %.0f ms%s", 1e3 * e.restore_s,
                e.restore_s < e.recompute_s ? "<" : ">=", 1e3 * e.recompute_s,
                e.decode_from_encode ? " (decode rate from encodes)" : "");
  return b;
}

Result<std::vector<std::vector<uint8_t>>> GetChainPayloads(Client* client, std::span<const ChunkKey> keys, uint32_t n) {
  std::vector<std::future<Result<GetResult>>> gets;
  for (uint32_t c = 0; c < n; ++c) gets.push_back(client->GetAsync(keys[0].stored(), keys[c].stored()));
  std::vector<std::vector<uint8_t>> payloads;
  Status status;
  for (auto& f : gets) {  // wait for every GET, keep the first error
    auto g = f.get();
    if (!g.ok()) {
      if (status.ok()) status = g.status();
      continue;
    }
    payloads.push_back(std::move(g->payload));
  }
  if (!status.ok()) return status;
  return payloads;
}

void LogSoftmax(std::span<const float> logits, float* out) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double s = 0;
  for (float x : logits) s += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(s);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(logits[i] - lse);
}

void ScorePosition(std::span<const float> logits, const float* p, uint32_t ref_token, double* top1, double* kl) {
  std::vector<float> lp(logits.size());
  *top1 += model::Argmax(logits) == ref_token;
  LogSoftmax(logits, lp.data());
  double d = 0;
  for (size_t v = 0; v < logits.size(); ++v) d += std::exp(static_cast<double>(p[v])) * (p[v] - lp[v]);
  *kl += d;
}

namespace {

// Greedy decoding of `n` tokens continuing `cache`, whose last row's logits are
// `logits`. When `logprobs` is given, appends the log-softmax of every row that chose a
// token ([n, vocab]).
Result<std::vector<uint32_t>> Continue(const model::Model& m, model::KvCache* cache,
                                       std::vector<float> logits, uint32_t n, std::vector<float>* logprobs) {
  const uint32_t V = m.config.vocab_size;
  std::vector<uint32_t> out;
  uint32_t tok = model::Argmax(logits);
  for (uint32_t i = 0;; ++i) {
    out.push_back(tok);
    if (logprobs) {
      logprobs->resize(logprobs->size() + V);
      LogSoftmax(logits, logprobs->data() + logprobs->size() - V);
    }
    if (i + 1 == n) break;
    KVSTASH_ASSIGN_OR_RETURN(auto r, model::Prefill(m, std::span(&tok, 1), cache));
    logits = std::move(r.logits);
    tok = model::Argmax(logits);
  }
  return out;
}

// Greedy decoding of `n` tokens after prefilling `suffix` on `cache` (Continue).
Result<std::vector<uint32_t>> Greedy(const model::Model& m, model::KvCache* cache,
                                     std::span<const uint32_t> suffix, uint32_t n,
                                     std::vector<float>* logprobs) {
  KVSTASH_ASSIGN_OR_RETURN(auto r, model::Prefill(m, suffix, cache));
  return Continue(m, cache, std::move(r.logits), n, logprobs);
}

// The bf16-rounded copy of an fp32 cache (what an engine with a bf16 KV cache holds).
Result<model::KvCache> RoundToBf16(const model::KvCache& exact) {
  KVSTASH_ASSIGN_OR_RETURN(KvChunk c, model::ToKvChunk(exact, 0, exact.tokens, DType::kBF16));
  return model::FromKvChunk(c.view());
}

// Seconds since t0, added to *acc.
void AddSeconds(Clock::time_point t0, double* acc) {
  *acc += std::chrono::duration<double>(Clock::now() - t0).count();
}

// The reference runtime's checks of a pass (see the top): the document's exact cache
// from its first miss, every hit against the exact cache and the reference answers.
class ReferenceChecks final : public SessionPassChecks {
 public:
  ReferenceChecks(const model::Model& m, const DemoWorkload& w, DemoReference* ref,
                  reference::ReferenceEngine* engine, bool lossy, uint32_t chunk_tokens, uint32_t gen_tokens)
      : m_(m),
        w_(w),
        ref_(*ref),
        engine_(*engine),
        lossy_(lossy),
        chunk_tokens_(chunk_tokens),
        gen_tokens_(gen_tokens) {}

  Status AfterPrefill(size_t i) override {
    const DemoRequest& rq = w_.requests[i];
    auto& doc = ref_.docs[rq.doc];
    if (doc.ready) return Status::Ok();  // this prefill's prefix is the document's exact cache
    KVSTASH_ASSIGN_OR_RETURN(
        doc.exact, engine_.cache().Prefix(static_cast<uint32_t>(w_.documents[rq.doc].prefix.size())));
    doc.ready = true;
    return Status::Ok();
  }

  Result<bool> CheckHit(size_t i, const session::EvalResult& r, DemoCodecRow* row, double* top1,
                        double* kl) override {
    const DemoRequest& rq = w_.requests[i];
    const auto& prefix = w_.documents[rq.doc].prefix;
    const bool whole = r.restored_tokens == prefix.size();
    model::KvCache& cache = engine_.cache();
    if (lossy_) {
      KVSTASH_RETURN_IF_ERROR(EnsureExact(rq));
      if (whole) KVSTASH_RETURN_IF_ERROR(EnsureFp32(i));
      KVSTASH_RETURN_IF_ERROR(ScoreLossy(i, whole, r.logits, &cache, row, top1, kl));
      return true;
    }
    KVSTASH_ASSIGN_OR_RETURN(auto answer, Continue(m_, &cache, r.logits, gen_tokens_, nullptr));
    KVSTASH_RETURN_IF_ERROR(EnsureExact(rq));
    const auto& exact = ref_.docs[rq.doc].exact;
    bool verified = true;
    for (uint32_t b = 0; b < r.restored_tokens && verified; b += chunk_tokens_) {
      const uint32_t e = std::min(b + chunk_tokens_, r.restored_tokens);
      KVSTASH_ASSIGN_OR_RETURN(KvChunk want, model::ToKvChunk(exact, b, e, engine_.kv_layout().dtype));
      KVSTASH_ASSIGN_OR_RETURN(KvChunk got, model::ToKvChunk(cache, b, e, engine_.kv_layout().dtype));
      verified = want.data == got.data;
    }
    // Only whole-prefix hits have a reference answer (a partial hit continues from
    // another point of the prefix); their chunks are still checked above.
    if (!whole) return verified;
    KVSTASH_RETURN_IF_ERROR(EnsureFp32(i));
    auto& rr = ref_.requests[i];
    const bool same_as_fp32 = answer == rr.fp32_tokens;
    row->same_tokens_as_fp32 += same_as_fp32;
    if (!same_as_fp32 && rr.bf16_tokens.empty()) {
      const auto t_ref = Clock::now();
      KVSTASH_ASSIGN_OR_RETURN(model::KvCache c16, RoundToBf16(exact));
      KVSTASH_ASSIGN_OR_RETURN(rr.bf16_tokens, Greedy(m_, &c16, rq.question_tokens, gen_tokens_, nullptr));
      AddSeconds(t_ref, &ref_.wall_s);
    }
    return verified && (same_as_fp32 || answer == rr.bf16_tokens);
  }

 private:
  // dckv: the fp32 reference answer teacher-forced; row g predicts answer token g.
  Status ScoreLossy(size_t i, bool whole, std::vector<float> logits, model::KvCache* cache, DemoCodecRow* row,
                    double* top1, double* kl) {
    const uint32_t V = m_.config.vocab_size;
    const auto& rr = ref_.requests[i];
    if (!whole) return Status::Ok();
    if (rr.fp32_tokens.size() > 1) {
      model::PrefillOptions po;
      po.logits = model::PrefillOptions::Logits::kAll;
      KVSTASH_ASSIGN_OR_RETURN(
          auto r1, model::Prefill(m_, std::span(rr.fp32_tokens).first(rr.fp32_tokens.size() - 1), cache, po));
      logits.insert(logits.end(), r1.logits.begin(), r1.logits.end());
    }
    if (rr.fp32_logprobs.empty()) return Status::Ok();
    for (size_t g = 0; g * V < logits.size(); ++g) {
      ScorePosition(std::span(logits).subspan(g * V, V), rr.fp32_logprobs.data() + g * V, rr.fp32_tokens[g],
                    top1, kl);
      ++row->scored_positions;
    }
    return Status::Ok();
  }

  // The document's exact prefix cache, from a full prefill of the prompt when no miss of
  // this document has produced it yet (a first request that is a partial hit).
  Status EnsureExact(const DemoRequest& rq) {
    auto& d = ref_.docs[rq.doc];
    if (d.ready) return Status::Ok();
    const auto t0 = Clock::now();
    const auto& prefix = w_.documents[rq.doc].prefix;
    std::vector<uint32_t> prompt(prefix.begin(), prefix.end());
    prompt.insert(prompt.end(), rq.question_tokens.begin(), rq.question_tokens.end());
    auto cache = model::KvCache::ForModel(m_.config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    KVSTASH_RETURN_IF_ERROR(model::Prefill(m_, prompt, &cache, po).status());
    KVSTASH_ASSIGN_OR_RETURN(d.exact, cache.Prefix(static_cast<uint32_t>(prefix.size())));
    d.ready = true;
    AddSeconds(t0, &ref_.wall_s);
    return Status::Ok();
  }

  // The request's fp32 reference answer and log-probabilities (REQUIRES the exact cache).
  Status EnsureFp32(size_t i) {
    auto& rr = ref_.requests[i];
    if (!rr.fp32_tokens.empty()) return Status::Ok();
    const auto t0 = Clock::now();
    model::KvCache c32 = ref_.docs[w_.requests[i].doc].exact;
    KVSTASH_ASSIGN_OR_RETURN(
        rr.fp32_tokens, Greedy(m_, &c32, w_.requests[i].question_tokens, gen_tokens_, &rr.fp32_logprobs));
    AddSeconds(t0, &ref_.wall_s);
    return Status::Ok();
  }

  const model::Model& m_;
  const DemoWorkload& w_;
  DemoReference& ref_;
  reference::ReferenceEngine& engine_;
  bool lossy_;  // dckv: scored, not checked
  uint32_t chunk_tokens_, gen_tokens_;
};

}  // namespace

Result<DemoCodecRow> RunDemoCodec(const model::Model& m, const DemoWorkload& w, DemoReference* reference,
                                  std::shared_ptr<const PrefixCodec> codec, std::shared_ptr<Client> client,
                                  const DemoRunOptions& o) {
  if (o.gen_tokens == 0) return Status::InvalidArgument("demo: gen_tokens must be > 0");
  DemoReference& ref = *reference;
  if (ref.docs.size() != w.documents.size() || ref.requests.size() != w.requests.size()) {
    ref = DemoReference{};
    ref.docs.resize(w.documents.size());
    ref.requests.resize(w.requests.size());
  }
  auto engine = std::make_unique<reference::ReferenceEngine>(m, codec->layout().dtype);
  ReferenceChecks checks(m, w, &ref, engine.get(), codec->kind() == PrefixCodecKind::kDckv,
                         codec->options().chunk_tokens, o.gen_tokens);
  return RunSessionPass(std::move(engine),
                        std::make_shared<const session::PrefixChunkCodec>(std::move(codec)),
                        std::move(client), w, &checks,
                        {o.gen_tokens, o.verbose, o.restore_policy, "reference", "fp32 full prefill",
                         "bit-exact, same answer"});
}

}  // namespace kvstash::demo
