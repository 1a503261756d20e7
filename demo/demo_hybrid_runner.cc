#include "demo/demo_hybrid_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "demo/demo_session_pass.h"
#include "engines/hybrid/hybrid_engine.h"

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
    // Every row: the reference of each hit's continuation; the last one starts the answer.
    auto s = hybrid::HybridState::Empty(m.config());
    rr.logits.resize(prompt.size() * V);
    KVSTASH_RETURN_IF_ERROR(m.EvalSequence(prompt, &s, rr.logits));
    KVSTASH_ASSIGN_OR_RETURN(rr.answer, Greedy(m, &s, Argmax(std::span(rr.logits).last(V)), o.gen_tokens));
  }
  ref.wall_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  return ref;
}

namespace {

// The hybrid runtime's checks of a pass (see the top): every loaded hit's KV, state,
// continuation and answer against the reference pass.
class HybridChecks final : public SessionPassChecks {
 public:
  HybridChecks(const hybrid::HybridModel& m, const DemoWorkload& w, const HybridDemoReference& ref,
               hybrid::HybridEngine* engine, bool lossy, const HybridDemoRunOptions& o, HybridDemoRow* out)
      : m_(m), w_(w), ref_(ref), engine_(*engine), lossy_(lossy), o_(o), out_(*out) {}

  Status AfterPrefill(size_t) override { return Status::Ok(); }

  Result<bool> CheckHit(size_t i, const session::EvalResult& r, DemoCodecRow* row, double* top1,
                        double* kl) override {
    const hybrid::HybridConfig& cfg = m_.config();
    const uint64_t V = cfg.vocab_size;
    const DemoRequest& rq = w_.requests[i];
    const auto& prefix = w_.documents[rq.doc].prefix;
    const auto& doc = ref_.docs[rq.doc];
    const auto& rr = ref_.requests[i];
    const uint32_t b = r.restored_tokens;
    const hybrid::HybridState& restored = engine_.imported();
    const auto suffix = Concat(std::span(prefix).subspan(b), rq.question_tokens);
    KVSTASH_ASSIGN_OR_RETURN(auto answer, Greedy(m_, &engine_.state(), Argmax(r.logits), o_.gen_tokens));
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
                           SameBytes(std::span(rows).last(V), r.logits);
    const bool answer_ok = answer == rr.answer;
    out_.kv_checks += kv_ok;
    out_.state_checks += state_ok;
    out_.logit_checks += logits_ok;
    if (lossy_) Score(std::span(rr.logits).subspan(uint64_t{b} * V), rows, row, top1, kl);
    row->same_tokens_as_fp32 += answer_ok;
    if (o_.verbose) {
      std::fprintf(stderr,
                   "[%s] request %zu/%zu: restored %u/%zu prefix tokens (KV + state); KV %s, state %s, %zu "
                   "continuation rows %s, answer %s\n",
                   row->codec.c_str(), i + 1, w_.requests.size(), b, prefix.size(),
                   kv_ok ? "exact" : "DIFFERS", state_ok ? "exact" : "DIFFERS", suffix.size(),
                   logits_ok ? "bit-identical" : (lossy_ ? "differ (lossy KV)" : "DIFFER"),
                   answer_ok ? "same" : "differs");
    }
    // Lossy KV: the state must still be exact (it is stored raw).
    return lossy_ ? state_ok : kv_ok && state_ok && logits_ok && answer_ok;
  }

  void AfterPass(const session::SessionStats& st) override {
    out_.states_put = static_cast<uint32_t>(st.states_put);
    out_.state_raw_bytes = st.put_state_raw_bytes;
    out_.state_stored_bytes = st.put_state_stored_bytes;
    out_.kv_raw_bytes = st.put_raw_bytes - st.put_state_raw_bytes;
    out_.kv_stored_bytes = st.put_payload_bytes - st.put_state_stored_bytes;
  }

 private:
  // Quality of every continuation row (`got`) against the full prefill's (`want`).
  void Score(std::span<const float> want_rows, std::span<const float> got_rows, DemoCodecRow* row,
             double* top1, double* kl) const {
    const uint64_t V = m_.config().vocab_size;
    std::vector<double> lp(V), lq(V);
    for (size_t g = 0; g * V < got_rows.size(); ++g) {
      const auto want = want_rows.subspan(g * V, V);
      const auto got = got_rows.subspan(g * V, V);
      *top1 += Argmax(want) == Argmax(got);
      LogSoftmax(want, lp);
      LogSoftmax(got, lq);
      double d = 0;
      for (uint64_t v = 0; v < V; ++v) d += std::exp(lp[v]) * (lp[v] - lq[v]);
      *kl += d;
      ++row->scored_positions;
    }
  }

  const hybrid::HybridModel& m_;
  const DemoWorkload& w_;
  const HybridDemoReference& ref_;
  hybrid::HybridEngine& engine_;
  bool lossy_;
  const HybridDemoRunOptions& o_;
  HybridDemoRow& out_;
};

}  // namespace

Result<HybridDemoRow> RunHybridCodec(const hybrid::HybridModel& m, const DemoWorkload& w,
                                     const HybridDemoReference& ref,
                                     std::shared_ptr<const session::ChunkCodec> codec,
                                     std::shared_ptr<Client> client, const HybridDemoRunOptions& o) {
  HybridDemoRow out;
  auto engine = std::make_unique<hybrid::HybridEngine>(m);
  HybridChecks checks(m, w, ref, engine.get(), codec->lossy(), o, &out);
  KVSTASH_ASSIGN_OR_RETURN(
      out.base, RunSessionPass(std::move(engine), std::move(codec), std::move(client), w, &checks,
                               {o.gen_tokens, o.verbose, o.restore_policy, "hybrid", "fp32 full prefill",
                                "KV + state exact, same answer"}));
  return out;
}

}  // namespace kvstash::demo
