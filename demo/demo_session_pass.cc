#include "demo/demo_session_pass.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "demo/demo_server.h"
#include "model/forward/generate.h"

namespace kvstash::demo {
namespace {

using session::ChainLookup;
using session::EngineSession;
using session::EvalResult;

// The pass's running state: the row and the lists its medians come from.
struct Pass {
  Pass(EngineSession* s, Client* c, const DemoWorkload& wl, SessionPassChecks* ch,
       const SessionPassOptions& opt)
      : session(s), client(c), w(wl), checks(ch), o(opt), lossy(s->codec().lossy()) {}

  EngineSession* session;
  Client* client;
  const DemoWorkload& w;
  SessionPassChecks* checks;
  const SessionPassOptions& o;
  bool lossy;
  DemoCodecRow row;
  DemoPassTally tally;
  std::vector<double> h_lookup, h_network, h_store, h_predictor, h_decode, h_suffix;

  // A miss or a declined hit of request i.
  Status Prefill(size_t i, std::span<const uint32_t> prompt, const ChainLookup& lk,
                 const RestoreEstimate& decision);
  // A hit of request i the cost model took.
  Status Restore(size_t i, std::span<const uint32_t> prompt, const ChainLookup& lk);
  DemoCodecRow Finish(double wall_s);
};

Status Pass::Prefill(size_t i, std::span<const uint32_t> prompt, const ChainLookup& lk,
                     const RestoreEstimate& decision) {
  KVSTASH_ASSIGN_OR_RETURN(EvalResult r, session->PrefillMiss(prompt, lk));
  const auto t0 = Clock::now();
  (void)model::Argmax(r.logits);
  const double ttft = lk.lookup_ms + r.prefill_ms + Ms(t0, Clock::now());
  // Requests arrive one after another: the miss's chunks are stored before the next.
  KVSTASH_RETURN_IF_ERROR(session->Flush().WithContext("put"));
  KVSTASH_RETURN_IF_ERROR(checks->AfterPrefill(i));
  if (lk.matched_chunks == 0) {
    ++row.misses;
    tally.ttft_miss.push_back(ttft);
    if (o.verbose) {
      std::fprintf(
          stderr, "[%s] request %zu/%zu: miss, TTFT %.0f ms (%s prefill of %zu tokens); %u chunks queued%s\n",
          row.codec.c_str(), i + 1, w.requests.size(), ttft, o.engine.c_str(), prompt.size(), r.queued_chunks,
          tally.SoFar().c_str());
    }
    return Status::Ok();
  }
  ++row.declined;
  row.declined_tokens += decision.tokens;
  tally.ttft_declined.push_back(ttft);
  row.estimates.push_back({static_cast<uint32_t>(i + 1), false, decision,
                           r.prefill_ms * static_cast<double>(decision.tokens) / prompt.size()});
  if (o.verbose) {
    std::fprintf(stderr, "[%s] request %zu/%zu: hit of %llu tokens declined (%s), TTFT %.0f ms%s\n",
                 row.codec.c_str(), i + 1, w.requests.size(),
                 static_cast<unsigned long long>(decision.tokens), DecisionText(decision).c_str(), ttft,
                 tally.SoFar().c_str());
  }
  return Status::Ok();
}

Status Pass::Restore(size_t i, std::span<const uint32_t> prompt, const ChainLookup& lk) {
  ++row.hits;
  const double store_before = ServerGetUs(client);
  KVSTASH_ASSIGN_OR_RETURN(EvalResult r, session->RestoreHit(prompt, lk));
  const double store_after = ServerGetUs(client);
  if (!r.fallback.ok()) {
    ++row.hits_mismatched;
    std::fprintf(stderr, "[%s] request %zu: the hit was not loaded, %s recomputed: %s\n", row.codec.c_str(),
                 i + 1, o.engine.c_str(), r.fallback.ToString().c_str());
    return session->Flush().WithContext("put");
  }
  row.matched_tokens += r.restored_tokens;
  const auto t0 = Clock::now();
  (void)model::Argmax(r.logits);
  const double first_ms = Ms(t0, Clock::now());
  const double ttft = r.lookup_ms + r.restore_ms + r.prefill_ms + first_ms;
  KVSTASH_RETURN_IF_ERROR(session->Flush().WithContext("put"));
  KVSTASH_ASSIGN_OR_RETURN(const bool verified, checks->CheckHit(i, r, &row, &tally.top1, &tally.kl));
  const double store_ms = store_before >= 0 && store_after >= 0 ? (store_after - store_before) / 1000.0 : 0.0;
  tally.ttft_hit.push_back(ttft);
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
                 "[%s] request %zu/%zu: hit %u/%u prefix tokens, TTFT %.0f ms (restore %.0f: get %.0f, "
                 "predictor %.0f, "
                 "decode %.0f, import %.0f; %s prefill of %u tokens %.0f; %s)%s%s\n",
                 row.codec.c_str(), i + 1, w.requests.size(), r.restored_tokens, lk.chain_tokens, ttft,
                 r.restore_ms, r.get_ms, r.predictor_ms, r.decode_ms - r.predictor_ms, r.import_ms,
                 o.engine.c_str(), r.evaluated_tokens, r.prefill_ms, DecisionText(r.estimate).c_str(),
                 lossy ? "" : (verified ? (" " + o.exact_text).c_str() : " MISMATCH"), tally.SoFar().c_str());
  }
  return Status::Ok();
}

DemoCodecRow Pass::Finish(double wall_s) {
  const session::SessionStats st = session->stats();
  row.raw_bytes = st.put_raw_bytes;
  row.stored_bytes = st.put_payload_bytes;
  tally.Finish(lossy, &row);
  if (row.misses) {
    row.encode_ms = st.encode_ms / row.misses;
    row.put_ms = st.put_ms / row.misses;
  }
  row.hit = {Median(h_lookup),    Median(h_network), Median(h_store),
             Median(h_predictor), Median(h_decode),  Median(h_suffix)};
  row.wall_s = wall_s;
  return row;
}

}  // namespace

Result<DemoCodecRow> RunSessionPass(std::unique_ptr<session::Engine> engine,
                                    std::shared_ptr<const session::ChunkCodec> codec_ptr,
                                    std::shared_ptr<Client> client, const DemoWorkload& w,
                                    SessionPassChecks* checks, const SessionPassOptions& o) {
  if (o.gen_tokens == 0) return Status::InvalidArgument("demo: gen_tokens must be > 0");
  const auto t_start = Clock::now();
  Client* raw_client = client.get();
  session::SessionOptions so;
  so.restore_cost.policy = o.restore_policy;
  KVSTASH_ASSIGN_OR_RETURN(
      std::unique_ptr<EngineSession> session,
      EngineSession::Create(std::move(engine), std::move(client), std::move(codec_ptr), so));
  Pass pass(session.get(), raw_client, w, checks, o);
  pass.row.codec = session->codec().name();
  pass.row.reference = o.reference;
  const uint64_t max_tokens = session->engine().max_tokens();
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const DemoRequest& rq = w.requests[i];
    const auto& prefix = w.documents[rq.doc].prefix;
    std::vector<uint32_t> prompt(prefix.begin(), prefix.end());
    prompt.insert(prompt.end(), rq.question_tokens.begin(), rq.question_tokens.end());
    if (prompt.size() + o.gen_tokens > max_tokens) {
      return Status::InvalidArgument("demo: a prompt of " + std::to_string(prompt.size()) + " tokens + " +
                                     std::to_string(o.gen_tokens) + " generated exceeds the context (" +
                                     std::to_string(max_tokens) + ")");
    }
    ++pass.row.requests;
    pass.row.prompt_tokens += prompt.size();
    KVSTASH_ASSIGN_OR_RETURN(ChainLookup lk, session->Lookup(prompt, static_cast<uint32_t>(prefix.size())));
    const RestoreEstimate decision = session->EstimateRestore(lk, prompt.size());
    if (lk.matched_chunks == 0 || !decision.take) {
      KVSTASH_RETURN_IF_ERROR(pass.Prefill(i, prompt, lk, decision));
    } else {
      KVSTASH_RETURN_IF_ERROR(pass.Restore(i, prompt, lk));
    }
  }
  KVSTASH_RETURN_IF_ERROR(session->Flush().WithContext("put"));
  checks->AfterPass(session->stats());
  return pass.Finish(Secs(t_start));
}

}  // namespace kvstash::demo
