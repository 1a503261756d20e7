#include "demo/demo_hybrid_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>

#include <nlohmann/json.hpp>

#include "common/payload_format.h"
#include "common/prefix_key.h"
#include "demo/demo_server.h"
#include "model/hybrid/hybrid_state.h"

namespace kvstash::demo {
namespace {

uint32_t Argmax(std::span<const float> v) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

std::vector<uint32_t> Concat(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  std::vector<uint32_t> v(a.begin(), a.end());
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

// Greedy continuation: `first` is the argmax of the last prompt row; n tokens in all.
Result<std::vector<uint32_t>> Greedy(const hybrid::HybridModel& m, hybrid::HybridState* s, uint32_t first,
                                     uint32_t n) {
  std::vector<uint32_t> out{first};
  std::vector<float> logits(m.config().vocab_size);
  while (out.size() < n) {
    KVSTASH_RETURN_IF_ERROR(m.Eval(out.back(), s, logits));
    out.push_back(Argmax(logits));
  }
  return out;
}

void LogSoftmax(std::span<const float> x, std::span<double> out) {
  const float mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - lse;
}

bool SameBytes(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

}  // namespace

std::vector<uint32_t> HybridStateBoundaries(uint32_t prefix_tokens, const HybridDemoRunOptions& o) {
  std::vector<uint32_t> b;
  const uint64_t step = uint64_t{o.chunk_tokens} * std::max<uint32_t>(o.state_every, 1);
  for (uint64_t t = step; t < prefix_tokens; t += step) b.push_back(static_cast<uint32_t>(t));
  if (prefix_tokens > 0) b.push_back(prefix_tokens);
  return b;
}

Result<HybridDemoReference> RunHybridReference(const hybrid::HybridModel& m, const DemoWorkload& w,
                                               const HybridDemoRunOptions& o) {
  if (o.gen_tokens == 0) return Status::InvalidArgument("hybrid demo: gen_tokens must be > 0");
  if (o.chunk_tokens == 0 || o.chunk_tokens > kMaxChunkTokens) {
    return Status::InvalidArgument("hybrid demo: chunk_tokens must be in 1.." + std::to_string(kMaxChunkTokens));
  }
  const auto t_start = Clock::now();
  const uint64_t V = m.config().vocab_size;
  HybridDemoReference ref;
  ref.docs.resize(w.documents.size());
  ref.requests.resize(w.requests.size());
  // Per document: the prefix token by token, the recurrent state exported at each
  // state boundary.
  for (size_t d = 0; d < w.documents.size(); ++d) {
    const auto& prefix = w.documents[d].prefix;
    auto& doc = ref.docs[d];
    doc.prefix_state = hybrid::HybridState::Empty(m.config());
    uint32_t at = 0;
    for (uint32_t b : HybridStateBoundaries(static_cast<uint32_t>(prefix.size()), o)) {
      KVSTASH_RETURN_IF_ERROR(m.EvalSequence(std::span(prefix).subspan(at, b - at), &doc.prefix_state, {}));
      at = b;
      KVSTASH_ASSIGN_OR_RETURN(doc.states[b], hybrid::ExportRecurrentState(m.config(), doc.prefix_state));
    }
  }
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const DemoRequest& rq = w.requests[i];
    auto& rr = ref.requests[i];
    const auto prompt = Concat(w.documents[rq.doc].prefix, rq.question_tokens);
    auto s = hybrid::HybridState::Empty(m.config());
    // Timed: the full prefill as an engine runs it (logits of the last row only).
    std::vector<float> last(V);
    const auto t0 = Clock::now();
    KVSTASH_RETURN_IF_ERROR(m.EvalSequence(prompt, &s, last));
    const uint32_t first = Argmax(last);
    rr.full_prefill_ms = Ms(t0, Clock::now());
    KVSTASH_ASSIGN_OR_RETURN(rr.answer, Greedy(m, &s, first, o.gen_tokens));
    // Untimed: every row, the reference of each hit's continuation.
    auto s2 = hybrid::HybridState::Empty(m.config());
    rr.logits.resize(prompt.size() * V);
    KVSTASH_RETURN_IF_ERROR(m.EvalSequence(prompt, &s2, rr.logits));
    if (!SameBytes(std::span(rr.logits).last(V), last)) {
      return Status::Internal("hybrid demo: the model's logits depend on how the logits are requested");
    }
    if (o.verbose) {
      std::fprintf(stderr, "[reference] request %zu/%zu: full prefill of %zu tokens %.1f ms\n", i + 1,
                   w.requests.size(), prompt.size(), rr.full_prefill_ms);
    }
  }
  ref.wall_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  return ref;
}

Result<HybridDemoRow> RunHybridCodec(const hybrid::HybridModel& m, const DemoWorkload& w,
                                     const HybridDemoReference& ref, const HybridKvCoder& coder,
                                     const std::string& cache_salt, const std::string& tenant, Client* client,
                                     const HybridDemoRunOptions& o) {
  const auto t_start = Clock::now();
  const hybrid::HybridConfig& cfg = m.config();
  const uint64_t V = cfg.vocab_size;
  Namespace ns;
  ns.model_fingerprint.assign(m.fingerprint().begin(), m.fingerprint().end());
  ns.layout = hybrid::HybridKvLayout(cfg);
  ns.chunk_tokens = o.chunk_tokens;
  ns.codec_id = coder.codec_id();
  ns.codec_artifact_digest = coder.artifact_digest();
  ns.cache_salt = cache_salt;
  ns.tenant = tenant;
  KVSTASH_ASSIGN_OR_RETURN(const Digest256 ns_digest, NamespaceDigest(ns));

  HybridDemoRow out;
  DemoCodecRow& row = out.base;
  row.codec = coder.name();
  std::vector<double> ttft_miss, ttft_hit, ttft_declined;
  double top1 = 0, kl = 0;
  RestoreCostOptions cost_options;
  cost_options.policy = o.restore_policy;
  RestoreCostModel cost(cost_options);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const DemoRequest& rq = w.requests[i];
    const auto& prefix = w.documents[rq.doc].prefix;
    const auto& doc = ref.docs[rq.doc];
    const auto& rr = ref.requests[i];
    ++row.requests;
    row.prompt_tokens += w.PromptTokens(rq);
    KVSTASH_ASSIGN_OR_RETURN(auto keys, ComputeChunkKeys(ns_digest, prefix, o.chunk_tokens, true));
    std::vector<ChunkRef> chain;
    for (const ChunkKey& k : keys) chain.push_back({k.stored(), k.tokens});
    auto t0 = Clock::now();
    KVSTASH_ASSIGN_OR_RETURN(LookupResult lk, client->Lookup(chain, /*require_state=*/true));
    const double lookup_ms = Ms(t0, Clock::now());
    uint32_t have = lk.matched_chunks;  // chunks the server holds (for the PUT below)
    const RestoreEstimate decision = cost.Estimate(lk.matched_tokens);
    const bool declined = have > 0 && !decision.take;

    bool served = false;
    if (have > 0 && !declined) {
      const uint32_t b = static_cast<uint32_t>(lk.matched_tokens);
      const double store_before = ServerGetUs(client);
      t0 = Clock::now();
      std::vector<std::future<Result<GetResult>>> gets;
      for (uint32_t c = 0; c < have; ++c) {
        GetOptions g;
        g.with_state = c + 1 == have;
        gets.push_back(client->GetAsync(keys[0].stored(), keys[c].stored(), g));
      }
      std::vector<std::vector<uint8_t>> payloads;
      std::vector<uint8_t> record;
      Status get_status;
      for (uint32_t c = 0; c < have; ++c) {
        auto g = gets[c].get();
        if (!g.ok()) {
          if (get_status.ok()) get_status = g.status();
          continue;
        }
        payloads.push_back(std::move(g->payload));
        if (c + 1 == have) record = std::move(g->state_record);
      }
      const double get_ms = Ms(t0, Clock::now());
      const double store_after = ServerGetUs(client);
      const double store_ms = store_before >= 0 && store_after >= 0 ? (store_after - store_before) / 1000.0 : 0.0;
      KVSTASH_RETURN_IF_ERROR(get_status);
      double predictor_ms = 0;
      t0 = Clock::now();
      // Each payload must be the one stored under the key it was read for.
      Status bound;
      for (uint32_t c = 0; c < payloads.size() && bound.ok(); ++c) {
        bound = CheckPayloadKey(payloads[c], keys[c].stored());
      }
      auto restored = bound.ok() ? coder.Restore(prefix, payloads, record, &predictor_ms)
                                 : Result<hybrid::HybridState>(bound);
      const double restore_ms = Ms(t0, Clock::now());
      uint64_t payload_bytes = record.size();
      for (const auto& p : payloads) payload_bytes += p.size();
      if (!restored.ok() || restored->tokens != b) {
        ++row.hits_mismatched;
        std::fprintf(stderr, "[%s] request %zu: restore failed (served as a miss): %s\n", row.codec.c_str(), i + 1,
                     restored.ok() ? "boundary differs from LOOKUP" : restored.status().ToString().c_str());
        have = 0;  // served as a miss; its chunks are stored again below
      } else {
        ++row.hits;
        row.matched_tokens += b;
        out.restored_state_tokens += b;
        const auto suffix = Concat(std::span(prefix).subspan(b), rq.question_tokens);
        // Timed: suffix prefill + first token, as an engine runs it.
        hybrid::HybridState s = *restored;
        std::vector<float> last(V);
        t0 = Clock::now();
        KVSTASH_RETURN_IF_ERROR(m.EvalSequence(suffix, &s, last));
        const uint32_t first = Argmax(last);
        const double first_ms = Ms(t0, Clock::now());
        KVSTASH_ASSIGN_OR_RETURN(auto answer, Greedy(m, &s, first, o.gen_tokens));

        // Checks (untimed): KV bytes, state bytes, every continuation row, the answer.
        KVSTASH_ASSIGN_OR_RETURN(KvChunk want_kv, hybrid::ExportKvChunk(cfg, doc.prefix_state, 0, b));
        KVSTASH_ASSIGN_OR_RETURN(KvChunk got_kv, hybrid::ExportKvChunk(cfg, *restored, 0, b));
        const bool kv_ok = want_kv.data == got_kv.data;
        KVSTASH_ASSIGN_OR_RETURN(RecurrentState got_state, hybrid::ExportRecurrentState(cfg, *restored));
        const auto want_state = doc.states.find(b);
        const bool state_ok = want_state != doc.states.end() && want_state->second == got_state;
        hybrid::HybridState s2 = *restored;
        std::vector<float> rows(suffix.size() * V);
        KVSTASH_RETURN_IF_ERROR(m.EvalSequence(suffix, &s2, rows));
        const bool logits_ok = SameBytes(rows, std::span(rr.logits).subspan(uint64_t{b} * V)) &&
                               SameBytes(std::span(rows).last(V), last);
        const bool answer_ok = answer == rr.answer;
        out.kv_checks += kv_ok;
        out.state_checks += state_ok;
        out.logit_checks += logits_ok;
        if (coder.lossy()) {  // quality of every continuation row vs the full prefill
          std::vector<double> lp(V), lq(V);
          for (size_t g = 0; g < suffix.size(); ++g) {
            const auto want = std::span(rr.logits).subspan((uint64_t{b} + g) * V, V);
            const auto got = std::span(rows).subspan(g * V, V);
            top1 += Argmax(want) == Argmax(got);
            LogSoftmax(want, lp);
            LogSoftmax(got, lq);
            double d = 0;
            for (uint64_t v = 0; v < V; ++v) d += std::exp(lp[v]) * (lp[v] - lq[v]);
            kl += d;
            ++row.scored_positions;
          }
        }
        // Lossy KV: the state must still be exact (it is stored raw).
        const bool verified = coder.lossy() ? state_ok : kv_ok && state_ok && logits_ok && answer_ok;
        verified ? ++row.hits_verified : ++row.hits_mismatched;
        row.same_tokens_as_fp32 += answer_ok;

        const double ttft = lookup_ms + get_ms + restore_ms + first_ms;
        ttft_hit.push_back(ttft);
        cost.ObserveRestore(b, payload_bytes, get_ms / 1e3, restore_ms / 1e3);
        cost.ObservePrefill(suffix.size(), first_ms / 1e3);
        row.estimates.push_back({static_cast<uint32_t>(i + 1), true, decision, get_ms + restore_ms});
        row.hit.lookup += lookup_ms;
        row.hit.network += std::max(0.0, get_ms - store_ms);
        row.hit.store += store_ms;
        row.hit.predictor += predictor_ms;
        row.hit.decode += restore_ms - predictor_ms;
        row.hit.suffix_prefill += first_ms;
        served = true;
        if (o.verbose) {
          std::fprintf(stderr,
                       "[%s] request %zu/%zu: hit %u/%zu prefix tokens (KV + state), TTFT %.1f ms (restore %.1f, "
                       "suffix %zu tokens %.1f; %s); KV %s, state %s, %zu continuation rows %s, answer %s\n",
                       row.codec.c_str(), i + 1, w.requests.size(), b, prefix.size(), ttft, get_ms + restore_ms,
                       suffix.size(), first_ms, DecisionText(decision).c_str(), kv_ok ? "exact" : "DIFFERS", state_ok ? "exact" : "DIFFERS",
                       suffix.size(), logits_ok ? "bit-identical" : (coder.lossy() ? "differ (lossy KV)" : "DIFFER"),
                       answer_ok ? "same" : "differs");
        }
      }
    }
    if (!served) {
      // A miss, a declined hit or a failed restore: the full prefill (measured once, in
      // the reference pass) and the first token.
      const uint64_t prompt_tokens = w.PromptTokens(rq);
      cost.ObservePrefill(prompt_tokens, rr.full_prefill_ms / 1e3);
      if (declined) {
        ++row.declined;
        row.declined_tokens += lk.matched_tokens;
        ttft_declined.push_back(lookup_ms + rr.full_prefill_ms);
        row.estimates.push_back({static_cast<uint32_t>(i + 1), false, decision,
                                 rr.full_prefill_ms * static_cast<double>(lk.matched_tokens) / prompt_tokens});
        if (o.verbose) {
          std::fprintf(stderr, "[%s] request %zu/%zu: hit of %llu tokens declined (%s), TTFT %.1f ms\n",
                       row.codec.c_str(), i + 1, w.requests.size(),
                       static_cast<unsigned long long>(lk.matched_tokens), DecisionText(decision).c_str(),
                       ttft_declined.back());
        }
      } else {
        ++row.misses;
        ttft_miss.push_back(lookup_ms + rr.full_prefill_ms);
      }
    }
    if (have == keys.size()) continue;
    // Store what the server lacks, after the first token: chunks [have, n), with a
    // state record on those ending at a state boundary.
    const auto boundaries = HybridStateBoundaries(static_cast<uint32_t>(prefix.size()), o);
    double encode_ms = 0, put_ms = 0;
    uint64_t put_bytes = 0;
    for (uint32_t c = have; c < keys.size(); ++c) {
      const uint32_t begin = c * o.chunk_tokens, end = begin + keys[c].tokens;
      PutChunk p;
      p.route = keys[0].stored();
      p.key = keys[c].stored();
      if (c > 0) p.parent = keys[c - 1].stored();
      t0 = Clock::now();
      KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> unbound,
                               coder.EncodeChunk(prefix, doc.prefix_state, begin, end, keys[c].partial));
      KVSTASH_ASSIGN_OR_RETURN(p.payload, BindPayloadToKey(unbound, p.key));
      const uint64_t kv_raw = ns.layout.DataBytes(end - begin);
      out.kv_raw_bytes += kv_raw;
      out.kv_stored_bytes += p.payload.size();
      if (std::find(boundaries.begin(), boundaries.end(), end) != boundaries.end()) {
        const RecurrentState& st = doc.states.at(end);
        KVSTASH_ASSIGN_OR_RETURN(p.state_record, coder.EncodeState(prefix, st));
        out.state_raw_bytes += st.DataBytes();
        out.state_stored_bytes += p.state_record.size();
        ++out.states_put;
        row.raw_bytes += st.DataBytes();
      }
      encode_ms += Ms(t0, Clock::now());
      row.raw_bytes += kv_raw;
      row.stored_bytes += p.payload.size() + p.state_record.size();
      put_bytes += p.payload.size() + p.state_record.size();
      t0 = Clock::now();
      KVSTASH_RETURN_IF_ERROR(client->Put(p));
      put_ms += Ms(t0, Clock::now());
    }
    row.encode_ms += encode_ms;
    row.put_ms += put_ms;
    cost.ObserveEncode(prefix.size() - uint64_t{have} * o.chunk_tokens, put_bytes, encode_ms / 1e3);
    if (o.verbose && !served && !declined) {
      std::fprintf(stderr, "[%s] request %zu/%zu: miss, TTFT %.1f ms; put %zu chunks %.3f MB (encode %.1f ms, put %.1f ms)\n",
                   row.codec.c_str(), i + 1, w.requests.size(), ttft_miss.back(), keys.size() - have, put_bytes / 1e6,
                   encode_ms, put_ms);
    }
  }
  FinishTtfts(ttft_miss, ttft_hit, ttft_declined, &row);
  if (row.misses) {
    row.encode_ms /= row.misses;
    row.put_ms /= row.misses;
  }
  if (row.hits) {
    for (double* x : {&row.hit.lookup, &row.hit.network, &row.hit.store, &row.hit.predictor, &row.hit.decode,
                      &row.hit.suffix_prefill}) {
      *x /= row.hits;
    }
  }
  if (coder.lossy() && row.scored_positions) {
    row.top1_agreement = top1 / row.scored_positions;
    row.kl_mean = kl / row.scored_positions;
  }
  row.wall_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  return out;
}

}  // namespace kvstash::demo
