#include "demo/demo_hybrid_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>

#include <nlohmann/json.hpp>

#include "demo/demo_server.h"
#include "kvstash/payload_format.h"
#include "kvstash/prefix_key.h"
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

namespace {

// What the GETs of a hit brought: the chunks' payloads and the last one's state record.
struct HybridFetch {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> record;
  double get_ms = 0, store_ms = 0;  // GET round trips; the server's own GET time
};

// The running state of one codec pass (RunHybridCodec).
class HybridPass {
 public:
  HybridPass(const hybrid::HybridModel& m, const DemoWorkload& w, const HybridDemoReference& ref,
             const HybridKvCoder& coder, Client* client, const HybridDemoRunOptions& o)
      : m_(m), w_(w), ref_(ref), coder_(coder), client_(client), o_(o), cost_(CostOptions(o)) {
    out_.base.codec = coder.name();
  }

  // One request: LOOKUP, then a restored hit, or the full prefill, then the PUT.
  Status Request(size_t i, const Digest256& ns_digest, const KvLayout& layout);
  HybridDemoRow Finish(double wall_s);

 private:
  static RestoreCostOptions CostOptions(const HybridDemoRunOptions& o) {
    RestoreCostOptions c;
    c.policy = o.restore_policy;
    return c;
  }
  Result<HybridFetch> Fetch(std::span<const ChunkKey> keys, uint32_t have);
  // A hit the cost model took; false when its restore failed (then served as a miss).
  Result<bool> Serve(size_t i, std::span<const ChunkKey> keys, const LookupResult& lk, double lookup_ms,
                     const RestoreEstimate& decision);
  // The checks of a restored hit (outside the timed part); returns whether it holds.
  Result<bool> Check(size_t i, const hybrid::HybridState& restored, uint32_t b,
                     std::span<const uint32_t> suffix, std::span<const float> last,
                     std::span<const uint32_t> answer, const std::string& timing);
  // A miss, a declined hit or a failed restore: the full prefill of the reference pass.
  void Recompute(size_t i, const LookupResult& lk, double lookup_ms, const RestoreEstimate& decision,
                 bool declined);
  // PUTs chunks [have, n) with their state records; verbose: the miss line.
  Status Put(size_t i, std::span<const ChunkKey> keys, uint32_t have, const KvLayout& layout, bool miss);

  const hybrid::HybridModel& m_;
  const DemoWorkload& w_;
  const HybridDemoReference& ref_;
  const HybridKvCoder& coder_;
  Client* client_;
  const HybridDemoRunOptions& o_;
  RestoreCostModel cost_;
  HybridDemoRow out_;
  DemoPassTally tally_;
};

Status HybridPass::Request(size_t i, const Digest256& ns_digest, const KvLayout& layout) {
  const DemoRequest& rq = w_.requests[i];
  const auto& prefix = w_.documents[rq.doc].prefix;
  DemoCodecRow& row = out_.base;
  ++row.requests;
  row.prompt_tokens += w_.PromptTokens(rq);
  KVSTASH_ASSIGN_OR_RETURN(auto keys, ComputeChunkKeys(ns_digest, prefix, o_.chunk_tokens, true));
  std::vector<ChunkRef> chain;
  for (const ChunkKey& k : keys) chain.push_back({k.stored(), k.tokens});
  const auto t0 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(LookupResult lk, client_->Lookup(chain, /*require_state=*/true));
  const double lookup_ms = Ms(t0, Clock::now());
  uint32_t have = lk.matched_chunks;  // chunks the server holds (for the PUT below)
  const RestoreEstimate decision = cost_.Estimate(lk.matched_tokens);
  const bool declined = have > 0 && !decision.take;
  bool served = false;
  if (have > 0 && !declined) {
    KVSTASH_ASSIGN_OR_RETURN(served, Serve(i, keys, lk, lookup_ms, decision));
    if (!served) have = 0;  // served as a miss; its chunks are stored again below
  }
  if (!served) Recompute(i, lk, lookup_ms, decision, declined);
  if (have == keys.size()) return Status::Ok();
  return Put(i, keys, have, layout, !served && !declined);
}

Result<HybridFetch> HybridPass::Fetch(std::span<const ChunkKey> keys, uint32_t have) {
  HybridFetch f;
  const double store_before = ServerGetUs(client_);
  const auto t0 = Clock::now();
  std::vector<std::future<Result<GetResult>>> gets;
  for (uint32_t c = 0; c < have; ++c) {
    GetOptions g;
    g.with_state = c + 1 == have;
    gets.push_back(client_->GetAsync(keys[0].stored(), keys[c].stored(), g));
  }
  Status get_status;
  for (uint32_t c = 0; c < have; ++c) {
    auto g = gets[c].get();
    if (!g.ok()) {
      if (get_status.ok()) get_status = g.status();
      continue;
    }
    f.payloads.push_back(std::move(g->payload));
    if (c + 1 == have) f.record = std::move(g->state_record);
  }
  f.get_ms = Ms(t0, Clock::now());
  const double store_after = ServerGetUs(client_);
  f.store_ms = store_before >= 0 && store_after >= 0 ? (store_after - store_before) / 1000.0 : 0.0;
  KVSTASH_RETURN_IF_ERROR(get_status);
  return f;
}

Result<bool> HybridPass::Serve(size_t i, std::span<const ChunkKey> keys, const LookupResult& lk,
                               double lookup_ms, const RestoreEstimate& decision) {
  const DemoRequest& rq = w_.requests[i];
  const auto& prefix = w_.documents[rq.doc].prefix;
  DemoCodecRow& row = out_.base;
  const uint64_t V = m_.config().vocab_size;
  const uint32_t b = static_cast<uint32_t>(lk.matched_tokens);
  KVSTASH_ASSIGN_OR_RETURN(HybridFetch f, Fetch(keys, lk.matched_chunks));
  double predictor_ms = 0;
  auto t0 = Clock::now();
  // Each payload must be the one stored under the key it was read for.
  Status bound;
  for (uint32_t c = 0; c < f.payloads.size() && bound.ok(); ++c) {
    bound = CheckPayloadKey(f.payloads[c], keys[c].stored());
  }
  auto restored = bound.ok() ? coder_.Restore(prefix, f.payloads, f.record, &predictor_ms)
                             : Result<hybrid::HybridState>(bound);
  const double restore_ms = Ms(t0, Clock::now());
  uint64_t payload_bytes = f.record.size();
  for (const auto& p : f.payloads) payload_bytes += p.size();
  if (!restored.ok() || restored->tokens != b) {
    ++row.hits_mismatched;
    std::fprintf(stderr, "[%s] request %zu: restore failed (served as a miss): %s\n", row.codec.c_str(),
                 i + 1,
                 restored.ok() ? "boundary differs from LOOKUP" : restored.status().ToString().c_str());
    return false;
  }
  ++row.hits;
  row.matched_tokens += b;
  out_.restored_state_tokens += b;
  const auto suffix = Concat(std::span(prefix).subspan(b), rq.question_tokens);
  // Timed: suffix prefill + first token, as an engine runs it.
  hybrid::HybridState s = *restored;
  std::vector<float> last(V);
  t0 = Clock::now();
  KVSTASH_RETURN_IF_ERROR(m_.EvalSequence(suffix, &s, last));
  const uint32_t first = Argmax(last);
  const double first_ms = Ms(t0, Clock::now());
  KVSTASH_ASSIGN_OR_RETURN(auto answer, Greedy(m_, &s, first, o_.gen_tokens));
  const double ttft = lookup_ms + f.get_ms + restore_ms + first_ms;
  char timing[256];
  std::snprintf(timing, sizeof timing, "TTFT %.1f ms (restore %.1f, suffix %zu tokens %.1f; %s)", ttft,
                f.get_ms + restore_ms, suffix.size(), first_ms, DecisionText(decision).c_str());
  KVSTASH_ASSIGN_OR_RETURN(const bool verified, Check(i, *restored, b, suffix, last, answer, timing));
  verified ? ++row.hits_verified : ++row.hits_mismatched;
  tally_.ttft_hit.push_back(ttft);
  cost_.ObserveRestore(b, payload_bytes, f.get_ms / 1e3, restore_ms / 1e3);
  cost_.ObservePrefill(suffix.size(), first_ms / 1e3);
  row.estimates.push_back({static_cast<uint32_t>(i + 1), true, decision, f.get_ms + restore_ms});
  row.hit.lookup += lookup_ms;
  row.hit.network += std::max(0.0, f.get_ms - f.store_ms);
  row.hit.store += f.store_ms;
  row.hit.predictor += predictor_ms;
  row.hit.decode += restore_ms - predictor_ms;
  row.hit.suffix_prefill += first_ms;
  return true;
}

Result<bool> HybridPass::Check(size_t i, const hybrid::HybridState& restored, uint32_t b,
                               std::span<const uint32_t> suffix, std::span<const float> last,
                               std::span<const uint32_t> answer, const std::string& timing) {
  const hybrid::HybridConfig& cfg = m_.config();
  const uint64_t V = cfg.vocab_size;
  const DemoRequest& rq = w_.requests[i];
  const auto& doc = ref_.docs[rq.doc];
  const auto& rr = ref_.requests[i];
  DemoCodecRow& row = out_.base;
  // KV bytes, state bytes, every continuation row, the answer.
  KVSTASH_ASSIGN_OR_RETURN(KvChunk want_kv, hybrid::ExportKvChunk(cfg, doc.prefix_state, 0, b));
  KVSTASH_ASSIGN_OR_RETURN(KvChunk got_kv, hybrid::ExportKvChunk(cfg, restored, 0, b));
  const bool kv_ok = want_kv.data == got_kv.data;
  KVSTASH_ASSIGN_OR_RETURN(RecurrentState got_state, hybrid::ExportRecurrentState(cfg, restored));
  const auto want_state = doc.states.find(b);
  const bool state_ok = want_state != doc.states.end() && want_state->second == got_state;
  hybrid::HybridState s2 = restored;
  std::vector<float> rows(suffix.size() * V);
  KVSTASH_RETURN_IF_ERROR(m_.EvalSequence(suffix, &s2, rows));
  const bool logits_ok = SameBytes(rows, std::span(rr.logits).subspan(uint64_t{b} * V)) &&
                         SameBytes(std::span(rows).last(V), last);
  const bool answer_ok = std::equal(answer.begin(), answer.end(), rr.answer.begin(), rr.answer.end());
  out_.kv_checks += kv_ok;
  out_.state_checks += state_ok;
  out_.logit_checks += logits_ok;
  if (coder_.lossy()) {  // quality of every continuation row vs the full prefill
    std::vector<double> lp(V), lq(V);
    for (size_t g = 0; g < suffix.size(); ++g) {
      const auto want = std::span(rr.logits).subspan((uint64_t{b} + g) * V, V);
      const auto got = std::span(rows).subspan(g * V, V);
      tally_.top1 += Argmax(want) == Argmax(got);
      LogSoftmax(want, lp);
      LogSoftmax(got, lq);
      double d = 0;
      for (uint64_t v = 0; v < V; ++v) d += std::exp(lp[v]) * (lp[v] - lq[v]);
      tally_.kl += d;
      ++row.scored_positions;
    }
  }
  row.same_tokens_as_fp32 += answer_ok;
  if (o_.verbose) {
    std::fprintf(
        stderr,
        "[%s] request %zu/%zu: hit %u/%zu prefix tokens (KV + state), %s; KV %s, state %s, %zu continuation "
        "rows %s, answer %s%s\n",
        row.codec.c_str(), i + 1, w_.requests.size(), b, w_.documents[rq.doc].prefix.size(), timing.c_str(),
        kv_ok ? "exact" : "DIFFERS", state_ok ? "exact" : "DIFFERS", suffix.size(),
        logits_ok ? "bit-identical" : (coder_.lossy() ? "differ (lossy KV)" : "DIFFER"),
        answer_ok ? "same" : "differs", tally_.SoFar().c_str());
  }
  // Lossy KV: the state must still be exact (it is stored raw).
  return coder_.lossy() ? state_ok : kv_ok && state_ok && logits_ok && answer_ok;
}

void HybridPass::Recompute(size_t i, const LookupResult& lk, double lookup_ms,
                           const RestoreEstimate& decision, bool declined) {
  const DemoRequest& rq = w_.requests[i];
  const auto& rr = ref_.requests[i];
  DemoCodecRow& row = out_.base;
  // The full prefill (measured once, in the reference pass) and the first token.
  const uint64_t prompt_tokens = w_.PromptTokens(rq);
  cost_.ObservePrefill(prompt_tokens, rr.full_prefill_ms / 1e3);
  if (!declined) {
    ++row.misses;
    tally_.ttft_miss.push_back(lookup_ms + rr.full_prefill_ms);
    return;
  }
  ++row.declined;
  row.declined_tokens += lk.matched_tokens;
  tally_.ttft_declined.push_back(lookup_ms + rr.full_prefill_ms);
  row.estimates.push_back({static_cast<uint32_t>(i + 1), false, decision,
                           rr.full_prefill_ms * static_cast<double>(lk.matched_tokens) / prompt_tokens});
  if (o_.verbose) {
    std::fprintf(stderr, "[%s] request %zu/%zu: hit of %llu tokens declined (%s), TTFT %.1f ms%s\n",
                 row.codec.c_str(), i + 1, w_.requests.size(),
                 static_cast<unsigned long long>(lk.matched_tokens), DecisionText(decision).c_str(),
                 tally_.ttft_declined.back(), tally_.SoFar().c_str());
  }
}

Status HybridPass::Put(size_t i, std::span<const ChunkKey> keys, uint32_t have, const KvLayout& layout,
                       bool miss) {
  const DemoRequest& rq = w_.requests[i];
  const auto& prefix = w_.documents[rq.doc].prefix;
  const auto& doc = ref_.docs[rq.doc];
  DemoCodecRow& row = out_.base;
  // Store what the server lacks, after the first token: chunks [have, n), with a
  // state record on those ending at a state boundary.
  const auto boundaries = HybridStateBoundaries(static_cast<uint32_t>(prefix.size()), o_);
  double encode_ms = 0, put_ms = 0;
  uint64_t put_bytes = 0;
  for (uint32_t c = have; c < keys.size(); ++c) {
    const uint32_t begin = c * o_.chunk_tokens, end = begin + keys[c].tokens;
    PutChunk p;
    p.route = keys[0].stored();
    p.key = keys[c].stored();
    if (c > 0) p.parent = keys[c - 1].stored();
    auto t0 = Clock::now();
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> unbound,
                             coder_.EncodeChunk(prefix, doc.prefix_state, begin, end, keys[c].partial));
    KVSTASH_ASSIGN_OR_RETURN(p.payload, BindPayloadToKey(unbound, p.key));
    const uint64_t kv_raw = layout.DataBytes(end - begin);
    out_.kv_raw_bytes += kv_raw;
    out_.kv_stored_bytes += p.payload.size();
    if (std::find(boundaries.begin(), boundaries.end(), end) != boundaries.end()) {
      const RecurrentState& st = doc.states.at(end);
      KVSTASH_ASSIGN_OR_RETURN(p.state_record, coder_.EncodeState(prefix, st));
      out_.state_raw_bytes += st.DataBytes();
      out_.state_stored_bytes += p.state_record.size();
      ++out_.states_put;
      row.raw_bytes += st.DataBytes();
    }
    encode_ms += Ms(t0, Clock::now());
    row.raw_bytes += kv_raw;
    row.stored_bytes += p.payload.size() + p.state_record.size();
    put_bytes += p.payload.size() + p.state_record.size();
    t0 = Clock::now();
    KVSTASH_RETURN_IF_ERROR(client_->Put(p));
    put_ms += Ms(t0, Clock::now());
  }
  row.encode_ms += encode_ms;
  row.put_ms += put_ms;
  cost_.ObserveEncode(prefix.size() - uint64_t{have} * o_.chunk_tokens, put_bytes, encode_ms / 1e3);
  if (o_.verbose && miss) {
    std::fprintf(
        stderr,
        "[%s] request %zu/%zu: miss, TTFT %.1f ms; put %zu chunks %.3f MB (encode %.1f ms, put %.1f ms)%s\n",
        row.codec.c_str(), i + 1, w_.requests.size(), tally_.ttft_miss.back(), keys.size() - have,
        put_bytes / 1e6, encode_ms, put_ms, tally_.SoFar().c_str());
  }
  return Status::Ok();
}

HybridDemoRow HybridPass::Finish(double wall_s) {
  DemoCodecRow& row = out_.base;
  tally_.Finish(coder_.lossy(), &row);
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
  row.wall_s = wall_s;
  return out_;
}

}  // namespace

Result<HybridDemoRow> RunHybridCodec(const hybrid::HybridModel& m, const DemoWorkload& w,
                                     const HybridDemoReference& ref, const HybridKvCoder& coder,
                                     const std::string& cache_salt, const std::string& tenant, Client* client,
                                     const HybridDemoRunOptions& o) {
  const auto t_start = Clock::now();
  Namespace ns;
  ns.model_fingerprint.assign(m.fingerprint().begin(), m.fingerprint().end());
  ns.layout = hybrid::HybridKvLayout(m.config());
  ns.chunk_tokens = o.chunk_tokens;
  ns.codec_id = coder.codec_id();
  ns.codec_artifact_digest = coder.artifact_digest();
  ns.cache_salt = cache_salt;
  ns.tenant = tenant;
  KVSTASH_ASSIGN_OR_RETURN(const Digest256 ns_digest, NamespaceDigest(ns));
  HybridPass pass(m, w, ref, coder, client, o);
  for (size_t i = 0; i < w.requests.size(); ++i)
    KVSTASH_RETURN_IF_ERROR(pass.Request(i, ns_digest, ns.layout));
  return pass.Finish(std::chrono::duration<double>(Clock::now() - t_start).count());
}

}  // namespace kvstash::demo
