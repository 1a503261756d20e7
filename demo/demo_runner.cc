#include "demo/demo_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "demo/demo_server.h"
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

void FinishTtfts(const std::vector<double>& miss, const std::vector<double>& hit,
                 const std::vector<double>& declined, DemoCodecRow* row) {
  row->ttft_miss_ms = Median(miss);
  row->ttft_hit_ms = Median(hit);
  row->ttft_declined_ms = Median(declined);
  row->hits_slower_than_miss = 0;
  if (miss.empty()) return;
  for (double t : hit) row->hits_slower_than_miss += t > row->ttft_miss_ms;
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

// Greedy decoding of `n` tokens after prefilling `suffix` on `cache`. When `logprobs`
// is given, appends the log-softmax of every row that chose a token ([n, vocab]).
// *first_ms: wall time of the suffix prefill and the first token.
Result<std::vector<uint32_t>> Greedy(const model::Model& m, model::KvCache* cache,
                                     std::span<const uint32_t> suffix, uint32_t n,
                                     double* first_ms, std::vector<float>* logprobs) {
  const uint32_t V = m.config.vocab_size;
  std::vector<uint32_t> out;
  const auto t0 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(auto r, model::Prefill(m, suffix, cache));
  uint32_t tok = model::Argmax(r.logits);
  if (first_ms) *first_ms = Ms(t0, Clock::now());
  for (uint32_t i = 0;; ++i) {
    out.push_back(tok);
    if (logprobs) {
      logprobs->resize(logprobs->size() + V);
      LogSoftmax(r.logits, logprobs->data() + logprobs->size() - V);
    }
    if (i + 1 == n) break;
    KVSTASH_ASSIGN_OR_RETURN(r, model::Prefill(m, std::span(&tok, 1), cache));
    tok = model::Argmax(r.logits);
  }
  return out;
}

// The bf16-rounded copy of an fp32 cache (what an engine with a bf16 KV cache holds).
Result<model::KvCache> RoundToBf16(const model::KvCache& exact) {
  KVSTASH_ASSIGN_OR_RETURN(KvChunk c, model::ToKvChunk(exact, 0, exact.tokens, DType::kBF16));
  return model::FromKvChunk(c.view());
}

std::vector<uint32_t> Concat(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  std::vector<uint32_t> v(a.begin(), a.end());
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

// Seconds since t0, added to *acc.
void AddSeconds(Clock::time_point t0, double* acc) {
  *acc += std::chrono::duration<double>(Clock::now() - t0).count();
}

// The document's exact prefix cache, from a full prefill of the prompt when no miss of
// this document has produced it yet (a first request that is a partial hit).
Status EnsureExact(const model::Model& m, std::span<const uint32_t> prompt, uint32_t prefix_tokens,
                   DemoReference* ref, uint32_t doc) {
  auto& d = ref->docs[doc];
  if (d.ready) return Status::Ok();
  const auto t0 = Clock::now();
  auto cache = model::KvCache::ForModel(m.config);
  model::PrefillOptions po;
  po.logits = model::PrefillOptions::Logits::kNone;
  KVSTASH_RETURN_IF_ERROR(model::Prefill(m, prompt, &cache, po).status());
  KVSTASH_ASSIGN_OR_RETURN(d.exact, cache.Prefix(prefix_tokens));
  d.ready = true;
  AddSeconds(t0, &ref->wall_s);
  return Status::Ok();
}

// The request's fp32 reference answer and log-probabilities (REQUIRES the exact cache).
Status EnsureFp32(const model::Model& m, std::span<const uint32_t> question, uint32_t gen_tokens,
                  const model::KvCache& exact, DemoReference* ref, size_t request) {
  auto& rr = ref->requests[request];
  if (!rr.fp32_tokens.empty()) return Status::Ok();
  const auto t0 = Clock::now();
  model::KvCache c32 = exact;
  KVSTASH_ASSIGN_OR_RETURN(rr.fp32_tokens, Greedy(m, &c32, question, gen_tokens, nullptr, &rr.fp32_logprobs));
  AddSeconds(t0, &ref->wall_s);
  return Status::Ok();
}

}  // namespace

Result<DemoCodecRow> RunDemoCodec(const model::Model& m, const DemoWorkload& w, DemoReference* reference,
                                  const PrefixCodec& codec, Client* client, const DemoRunOptions& o) {
  if (o.gen_tokens == 0) return Status::InvalidArgument("demo: gen_tokens must be > 0");
  DemoReference& ref = *reference;
  if (ref.docs.size() != w.documents.size() || ref.requests.size() != w.requests.size()) {
    ref = DemoReference{};
    ref.docs.resize(w.documents.size());
    ref.requests.resize(w.requests.size());
  }
  const auto t_start = Clock::now();
  const uint32_t V = m.config.vocab_size;
  const bool lossy = codec.kind() == PrefixCodecKind::kDckv;
  DemoCodecRow row;
  row.codec = PrefixCodecName(codec.kind());
  std::vector<double> ttft_miss, ttft_hit, ttft_declined;
  std::vector<double> h_lookup, h_network, h_store, h_predictor, h_decode, h_suffix;
  double top1 = 0, kl = 0;
  RestoreCostOptions cost_options;
  cost_options.policy = o.restore_policy;
  RestoreCostModel cost(cost_options);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const DemoRequest& rq = w.requests[i];
    const auto& prefix = w.documents[rq.doc].prefix;
    const auto& exact = ref.docs[rq.doc].exact;
    const auto prompt = Concat(prefix, rq.question_tokens);
    ++row.requests;
    row.prompt_tokens += w.PromptTokens(rq);
    KVSTASH_ASSIGN_OR_RETURN(auto keys, codec.ChainKeys(prefix, ChainInputs::TokensOnly()));
    const auto chain = PrefixCodec::LookupChain(keys);
    auto t0 = Clock::now();
    KVSTASH_ASSIGN_OR_RETURN(LookupResult lk, client->Lookup(chain));
    const double lookup_ms = Ms(t0, Clock::now());
    const uint32_t matched_chunks = lk.matched_chunks;
    const uint64_t lookup_matched = codec.TokensOfChunks(prefix.size(), matched_chunks);
    const RestoreEstimate decision = cost.Estimate(lookup_matched);

    if (matched_chunks == 0 || !decision.take) {
      // What a miss (or a declined hit) costs: the full prefill of the prompt and the
      // first token.
      auto cache = model::KvCache::ForModel(m.config);
      t0 = Clock::now();
      KVSTASH_ASSIGN_OR_RETURN(auto r, model::Prefill(m, prompt, &cache));
      (void)model::Argmax(r.logits);
      const double prefill_ms = Ms(t0, Clock::now());
      cost.ObservePrefill(prompt.size(), prefill_ms / 1e3);
      if (matched_chunks == 0) {
        ++row.misses;
        ttft_miss.push_back(lookup_ms + prefill_ms);
      } else {
        ++row.declined;
        row.declined_tokens += lookup_matched;
        ttft_declined.push_back(lookup_ms + prefill_ms);
        row.estimates.push_back({static_cast<uint32_t>(i + 1), false, decision,
                                 prefill_ms * static_cast<double>(lookup_matched) / prompt.size()});
        if (o.verbose) {
          std::fprintf(stderr, "[%s] request %zu/%zu: hit of %llu tokens declined (%s), TTFT %.0f ms\n",
                       row.codec.c_str(), i + 1, w.requests.size(),
                       static_cast<unsigned long long>(lookup_matched), DecisionText(decision).c_str(),
                       ttft_declined.back());
        }
      }
      auto& doc = ref.docs[rq.doc];
      if (!doc.ready) {  // this prefill's prefix is the document's exact cache
        KVSTASH_ASSIGN_OR_RETURN(doc.exact, cache.Prefix(static_cast<uint32_t>(prefix.size())));
        doc.ready = true;
      }
      if (matched_chunks == keys.size()) continue;  // a declined whole-prefix hit: nothing to PUT
    } else {
      ++row.hits;
      const uint64_t matched = codec.TokensOfChunks(prefix.size(), matched_chunks);
      row.matched_tokens += matched;
      const double store_before = ServerGetUs(client);
      t0 = Clock::now();
      auto got = GetChainPayloads(client, keys, matched_chunks);
      const double get_ms = Ms(t0, Clock::now());
      const double store_after = ServerGetUs(client);
      const double store_ms = store_before >= 0 && store_after >= 0 ? (store_after - store_before) / 1000.0 : 0.0;
      KVSTASH_RETURN_IF_ERROR(got.status());
      const std::vector<std::vector<uint8_t>> payloads = std::move(got).value();
      uint64_t payload_bytes = 0;
      for (const auto& p : payloads) payload_bytes += p.size();
      PrefixRestoreStats rs;
      auto restored = codec.Restore(prefix, payloads, &rs);
      if (!restored.ok()) {
        ++row.hits_mismatched;
        std::fprintf(stderr, "[%s] request %zu: restore failed: %s\n", row.codec.c_str(), i + 1,
                     restored.status().ToString().c_str());
        continue;
      }
      // Suffix: the unmatched part of the prefix, then the question.
      const auto suffix = Concat(std::span(prefix).subspan(matched), rq.question_tokens);
      model::KvCache cache = std::move(*restored->cache);
      double first_ms = 0;
      bool verified = true;
      std::vector<uint32_t> answer;
      if (!lossy) {
        KVSTASH_ASSIGN_OR_RETURN(answer, Greedy(m, &cache, suffix, o.gen_tokens, &first_ms, nullptr));
        KVSTASH_RETURN_IF_ERROR(EnsureExact(m, prompt, static_cast<uint32_t>(prefix.size()), &ref, rq.doc));
        for (uint32_t c = 0; c < matched_chunks && verified; ++c) {
          const uint32_t b = c * codec.options().chunk_tokens;
          KVSTASH_ASSIGN_OR_RETURN(KvChunk want, model::ToKvChunk(exact, b, b + keys[c].tokens, DType::kBF16));
          verified = want.data == restored->chunks[c].data;
        }
        // Only whole-prefix hits have a reference answer (a partial hit continues from
        // another point of the prefix); their chunks are still checked above.
        if (matched == prefix.size()) {
          KVSTASH_RETURN_IF_ERROR(EnsureFp32(m, rq.question_tokens, o.gen_tokens, exact, &ref, i));
          auto& rr = ref.requests[i];
          const bool same_as_fp32 = answer == rr.fp32_tokens;
          row.same_tokens_as_fp32 += same_as_fp32;
          if (!same_as_fp32 && rr.bf16_tokens.empty()) {
            const auto t_ref = Clock::now();
            KVSTASH_ASSIGN_OR_RETURN(model::KvCache c16, RoundToBf16(exact));
            KVSTASH_ASSIGN_OR_RETURN(rr.bf16_tokens,
                                     Greedy(m, &c16, rq.question_tokens, o.gen_tokens, nullptr, nullptr));
            AddSeconds(t_ref, &ref.wall_s);
          }
          verified = verified && (same_as_fp32 || answer == rr.bf16_tokens);
        }
      } else {
        // Teacher-forced on the fp32 reference answer: row g predicts answer token g.
        const auto t1 = Clock::now();
        KVSTASH_ASSIGN_OR_RETURN(auto r0, model::Prefill(m, suffix, &cache));
        first_ms = Ms(t1, Clock::now());
        KVSTASH_RETURN_IF_ERROR(EnsureExact(m, prompt, static_cast<uint32_t>(prefix.size()), &ref, rq.doc));
        if (matched == prefix.size()) {
          KVSTASH_RETURN_IF_ERROR(EnsureFp32(m, rq.question_tokens, o.gen_tokens, exact, &ref, i));
        }
        const auto& rr = ref.requests[i];
        std::vector<float> logits = std::move(r0.logits);
        if (rr.fp32_tokens.size() > 1 && matched == prefix.size()) {
          model::PrefillOptions po;
          po.logits = model::PrefillOptions::Logits::kAll;
          KVSTASH_ASSIGN_OR_RETURN(auto r1, model::Prefill(m, std::span(rr.fp32_tokens).first(rr.fp32_tokens.size() - 1), &cache, po));
          logits.insert(logits.end(), r1.logits.begin(), r1.logits.end());
        }
        if (matched == prefix.size() && !rr.fp32_logprobs.empty()) {
          for (size_t g = 0; g * V < logits.size(); ++g) {
            ScorePosition(std::span(logits).subspan(g * V, V), rr.fp32_logprobs.data() + g * V,
                          rr.fp32_tokens[g], &top1, &kl);
            ++row.scored_positions;
          }
        }
      }
      const double restore_ms = get_ms + rs.predictor_ms + rs.decode_ms + rs.assemble_ms;
      const double ttft = lookup_ms + restore_ms + first_ms;
      cost.ObserveRestore(matched, payload_bytes, get_ms / 1e3, (restore_ms - get_ms) / 1e3);
      cost.ObservePrefill(suffix.size(), first_ms / 1e3);
      row.estimates.push_back({static_cast<uint32_t>(i + 1), true, decision, restore_ms});
      ttft_hit.push_back(ttft);
      h_lookup.push_back(lookup_ms);
      h_network.push_back(std::max(0.0, get_ms - store_ms));
      h_store.push_back(store_ms);
      h_predictor.push_back(rs.predictor_ms);
      h_decode.push_back(rs.decode_ms + rs.assemble_ms);
      h_suffix.push_back(first_ms);
      verified ? ++row.hits_verified : ++row.hits_mismatched;
      if (o.verbose) {
        std::fprintf(stderr, "[%s] request %zu/%zu: hit %llu/%zu prefix tokens, TTFT %.0f ms (restore %.0f: predictor %.0f, decode %.0f; suffix %zu tokens %.0f; %s)%s\n",
                     row.codec.c_str(), i + 1, w.requests.size(), static_cast<unsigned long long>(matched),
                     prefix.size(), ttft, restore_ms, rs.predictor_ms, rs.decode_ms + rs.assemble_ms, suffix.size(),
                     first_ms, DecisionText(decision).c_str(),
                     lossy ? "" : (verified ? " bit-exact, same answer" : " MISMATCH"));
      }
      if (matched_chunks == keys.size()) continue;
    }
    // Store what the server lacks (chunks [matched_chunks, n)), after the first token.
    PrefixEncodeStats es;
    KVSTASH_ASSIGN_OR_RETURN(auto puts, codec.EncodeChunks(prefix, exact, matched_chunks, &es));
    t0 = Clock::now();
    for (const PutChunk& p : puts) KVSTASH_RETURN_IF_ERROR(client->Put(p));
    const double put_ms = Ms(t0, Clock::now());
    cost.ObserveEncode(prefix.size() - codec.TokensOfChunks(prefix.size(), matched_chunks), es.stored_bytes,
                       (es.predictor_ms + es.encode_ms) / 1e3);
    row.raw_bytes += es.raw_bytes;
    row.stored_bytes += es.stored_bytes;
    row.encode_ms += es.predictor_ms + es.encode_ms;
    row.put_ms += put_ms;
    if (o.verbose && matched_chunks == 0) {
      std::fprintf(stderr, "[%s] request %zu/%zu: miss, TTFT %.0f ms; put %zu chunks %.2f MB -> %.2f MB (encode %.0f ms, predictor %.0f ms, put %.0f ms)\n",
                   row.codec.c_str(), i + 1, w.requests.size(), ttft_miss.back(), puts.size(), es.raw_bytes / 1e6,
                   es.stored_bytes / 1e6, es.encode_ms, es.predictor_ms, put_ms);
    }
  }
  FinishTtfts(ttft_miss, ttft_hit, ttft_declined, &row);
  if (row.misses) {
    row.encode_ms /= row.misses;
    row.put_ms /= row.misses;
  }
  row.hit = {Median(h_lookup), Median(h_network), Median(h_store), Median(h_predictor), Median(h_decode),
             Median(h_suffix)};
  if (lossy && row.scored_positions) {
    row.top1_agreement = top1 / row.scored_positions;
    row.kl_mean = kl / row.scored_positions;
  }
  row.wall_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  return row;
}

}  // namespace kvstash::demo
