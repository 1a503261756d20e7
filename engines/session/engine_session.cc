#include "engines/session/engine_session.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <utility>

#include "common/kv_chunk_slice.h"

namespace kvstash::session {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string LayoutText(const KvLayout& l) {
  return std::to_string(l.n_layers) + " layers, " + std::to_string(l.n_kv_heads) + "x" +
         std::to_string(l.head_dim) + ", " + std::string(DTypeName(l.dtype));
}

}  // namespace

Result<std::unique_ptr<EngineSession>> EngineSession::Create(std::unique_ptr<Engine> engine,
                                                             std::shared_ptr<Client> client,
                                                             std::shared_ptr<const ChunkCodec> codec,
                                                             SessionOptions options) {
  if (!engine || !client || !codec) {
    return Status::InvalidArgument("an engine session needs an engine, a client and a codec");
  }
  if (options.max_queued_puts == 0) return Status::InvalidArgument("max_queued_puts must be > 0");
  KVSTASH_RETURN_IF_ERROR(ValidateRestoreCostOptions(options.restore_cost));
  if (!(codec->layout() == engine->kv_layout())) {
    return Status::InvalidArgument("the codec's KV layout (" + LayoutText(codec->layout()) +
                                   ") is not the engine's (" + LayoutText(engine->kv_layout()) + ")");
  }
  if (codec->stores_state() != engine->has_state()) {
    return Status::InvalidArgument(engine->has_state()
                                       ? "the engine holds a recurrent state the codec does not store"
                                       : "the codec stores recurrent states the engine does not hold");
  }
  return std::unique_ptr<EngineSession>(
      new EngineSession(std::move(engine), std::move(client), std::move(codec), std::move(options)));
}

EngineSession::EngineSession(std::unique_ptr<Engine> engine, std::shared_ptr<Client> client,
                             std::shared_ptr<const ChunkCodec> codec, SessionOptions options)
    : engine_(std::move(engine)),
      client_(std::move(client)),
      codec_(std::move(codec)),
      options_(std::move(options)),
      cost_(options_.cost_model ? options_.cost_model
                                : std::make_shared<RestoreCostModel>(options_.restore_cost)) {
  put_thread_ = std::thread([this] { PutLoop(); });
}

EngineSession::~EngineSession() {
  (void)Flush();
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  put_thread_.join();
}

SessionStats EngineSession::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

Status EngineSession::CheckPrompt(std::span<const uint32_t> tokens) const {
  if (tokens.empty()) return Status::InvalidArgument("empty prompt");
  if (tokens.size() > engine_->max_tokens()) {
    return Status::InvalidArgument("prompt of " + std::to_string(tokens.size()) +
                                   " tokens is longer than the context (" +
                                   std::to_string(engine_->max_tokens()) + ")");
  }
  return Status::Ok();
}

Status EngineSession::CheckLookup(std::span<const uint32_t> tokens, const ChainLookup& lookup) {
  uint64_t covered = 0;
  for (const ChunkKey& k : lookup.keys) covered += k.tokens;
  if (lookup.keys.empty() || lookup.chain_tokens == 0 || lookup.chain_tokens > tokens.size() ||
      covered != lookup.chain_tokens || lookup.matched_chunks > lookup.keys.size()) {
    return Status::InvalidArgument("the lookup is not a chain of a prefix of this prompt");
  }
  return Status::Ok();
}

Result<ChainLookup> EngineSession::ChainOf(std::span<const uint32_t> tokens, uint32_t chain_tokens) const {
  if (tokens.empty()) return Status::InvalidArgument("empty prompt");
  if (chain_tokens > tokens.size()) {
    return Status::InvalidArgument("chain_tokens " + std::to_string(chain_tokens) + " > prompt of " +
                                   std::to_string(tokens.size()) + " tokens");
  }
  ChainLookup out;
  out.chain_tokens = chain_tokens == 0 ? static_cast<uint32_t>(tokens.size()) : chain_tokens;
  KVSTASH_ASSIGN_OR_RETURN(out.keys, codec_->ChainKeys(tokens.first(out.chain_tokens)));
  return out;
}

Result<ChainLookup> EngineSession::Lookup(std::span<const uint32_t> tokens, uint32_t chain_tokens) {
  const auto t0 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(ChainLookup out, ChainOf(tokens, chain_tokens));
  std::vector<ChunkRef> chain;
  chain.reserve(out.keys.size());
  for (const ChunkKey& k : out.keys) chain.push_back({k.stored(), k.tokens});
  KVSTASH_ASSIGN_OR_RETURN(LookupResult r, client_->Lookup(chain, codec_->stores_state(), options_.call));
  out.matched_chunks = std::min<uint32_t>(r.matched_chunks, static_cast<uint32_t>(out.keys.size()));
  out.matched_tokens = codec_->TokensOfChunks(out.chain_tokens, out.matched_chunks);
  out.lookup_ms = Ms(t0, Clock::now());
  return out;
}

Result<EvalResult> EngineSession::EvaluatePrompt(std::span<const uint32_t> tokens, uint32_t chain_tokens) {
  KVSTASH_RETURN_IF_ERROR(CheckPrompt(tokens));
  auto lookup = Lookup(tokens, chain_tokens);
  if (!lookup.ok()) {
    // No LOOKUP answer: a miss. The chain is still computed (keys are local) so the
    // prompt can be stored once the servers answer again.
    KVSTASH_ASSIGN_OR_RETURN(ChainLookup miss, ChainOf(tokens, chain_tokens));
    KVSTASH_ASSIGN_OR_RETURN(EvalResult r, PrefillMiss(tokens, miss));
    r.fallback = lookup.status().WithContext("lookup");
    return r;
  }
  if (lookup->matched_chunks == 0) return PrefillMiss(tokens, *lookup);
  const RestoreEstimate estimate = EstimateRestore(*lookup, tokens.size());
  if (estimate.take) return RestoreHit(tokens, *lookup);
  KVSTASH_ASSIGN_OR_RETURN(EvalResult r, PrefillMiss(tokens, *lookup));
  r.declined = true;
  MutexLock lock(mu_);
  ++stats_.declined_hits;
  stats_.declined_tokens += estimate.tokens;
  return r;
}

RestoreEstimate EngineSession::EstimateRestore(const ChainLookup& lookup, size_t prompt_tokens) const {
  const uint64_t tokens =
      prompt_tokens == 0 ? 0 : std::min<uint64_t>(lookup.matched_tokens, prompt_tokens - 1);
  return cost_->Estimate(tokens);
}

Result<EvalResult> EngineSession::PrefillMiss(std::span<const uint32_t> tokens, const ChainLookup& lookup) {
  KVSTASH_RETURN_IF_ERROR(CheckPrompt(tokens));
  KVSTASH_RETURN_IF_ERROR(CheckLookup(tokens, lookup));
  EvalResult out;
  out.prompt_tokens = static_cast<uint32_t>(tokens.size());
  out.lookup_ms = lookup.lookup_ms;
  engine_->Clear();
  KeepStates(lookup);
  const auto t0 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(out.logits, engine_->Prefill(tokens, 0));
  out.prefill_ms = Ms(t0, Clock::now());
  out.evaluated_tokens = out.prompt_tokens;
  cost_->ObservePrefill(out.evaluated_tokens, out.prefill_ms / 1e3);
  if (lookup.matched_chunks > 0) out.estimate = EstimateRestore(lookup, tokens.size());
  {
    MutexLock lock(mu_);
    ++stats_.prompts;
  }
  // Chunks already stored need no PUT (a LOOKUP hit the caller chose not to use).
  QueuePutCounted(tokens, lookup, &out);
  return out;
}

Result<EvalResult> EngineSession::RestoreHit(std::span<const uint32_t> tokens, const ChainLookup& lookup) {
  KVSTASH_RETURN_IF_ERROR(CheckPrompt(tokens));
  KVSTASH_RETURN_IF_ERROR(CheckLookup(tokens, lookup));
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  if (lookup.matched_chunks == 0) return PrefillMiss(tokens, lookup);
  // Restore at most n-1 tokens: the last one is evaluated for its logits.
  const uint32_t restore_tokens = static_cast<uint32_t>(std::min<uint64_t>(lookup.matched_tokens, n - 1));
  if (restore_tokens == 0) return PrefillMiss(tokens, lookup);

  EvalResult out;
  out.prompt_tokens = n;
  out.lookup_ms = lookup.lookup_ms;
  out.estimate = EstimateRestore(lookup, n);
  const auto t0 = Clock::now();
  const Status st = Restore(tokens, lookup, restore_tokens, &out);
  out.restore_ms = Ms(t0, Clock::now());
  if (!st.ok()) {
    // Recompute: the whole prompt, as a miss; chunks the LOOKUP saw are not re-put.
    KVSTASH_ASSIGN_OR_RETURN(EvalResult miss, PrefillMiss(tokens, lookup));
    miss.fallback = st;
    miss.restore_ms = out.restore_ms;
    MutexLock lock(mu_);
    ++stats_.fallbacks;
    if (st.IsCorruption()) ++stats_.fallbacks_corruption;
    if (st.IsMismatch()) ++stats_.fallbacks_mismatch;
    return miss;
  }
  cost_->ObserveRestore(restore_tokens, out.get_payload_bytes, out.get_ms / 1e3,
                        (out.restore_ms - out.get_ms) / 1e3);
  out.restored_tokens = restore_tokens;
  out.restored_chunks = lookup.matched_chunks;
  KeepStates(lookup);
  const auto t1 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(out.logits, engine_->Prefill(tokens.subspan(restore_tokens), restore_tokens));
  out.prefill_ms = Ms(t1, Clock::now());
  out.evaluated_tokens = n - restore_tokens;
  cost_->ObservePrefill(out.evaluated_tokens, out.prefill_ms / 1e3);
  {
    MutexLock lock(mu_);
    ++stats_.prompts;
    ++stats_.hits;
  }
  if (lookup.matched_chunks < lookup.keys.size()) QueuePutCounted(tokens, lookup, &out);
  return out;
}

void EngineSession::KeepStates(const ChainLookup& lookup) {
  if (!codec_->stores_state()) return;
  const uint32_t n = static_cast<uint32_t>(lookup.keys.size());
  std::vector<uint32_t> boundaries;
  uint32_t end = 0;
  for (uint32_t i = 0; i < n; ++i) {
    end += lookup.keys[i].tokens;
    if (i >= lookup.matched_chunks && codec_->StateAfterChunk(i, n)) boundaries.push_back(end);
  }
  engine_->KeepStatesAt(boundaries);
}

Status EngineSession::Fetch(const ChainLookup& lookup, std::vector<std::vector<uint8_t>>* payloads,
                            std::vector<uint8_t>* record, EvalResult* out) {
  const auto t0 = Clock::now();
  const StoredKey route = lookup.keys[0].stored();
  const uint32_t n = lookup.matched_chunks;
  std::vector<std::future<Result<GetResult>>> gets;
  gets.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    GetOptions g;
    g.with_state = codec_->stores_state() && i + 1 == n;
    gets.push_back(client_->GetAsync(route, lookup.keys[i].stored(), g, options_.call));
  }
  payloads->reserve(n);
  Status st;
  for (uint32_t i = 0; i < n; ++i) {
    Result<GetResult> g = gets[i].get();
    if (!g.ok()) {
      if (st.ok()) st = g.status().WithContext("get chunk " + std::to_string(i));
      continue;
    }
    out->get_payload_bytes += g->payload.size() + g->state_record.size();
    payloads->push_back(std::move(g->payload));
    if (i + 1 == n) *record = std::move(g->state_record);
  }
  out->get_ms = Ms(t0, Clock::now());
  return st;
}

Status EngineSession::Restore(std::span<const uint32_t> tokens, const ChainLookup& lookup,
                              uint32_t restore_tokens, EvalResult* out) {
  engine_->Clear();
  // GET every matched chunk (pipelined), then decode and verify them together.
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> record;
  KVSTASH_RETURN_IF_ERROR(Fetch(lookup, &payloads, &record, out));

  const auto t1 = Clock::now();
  ChunkRestoreStats rs;
  RecurrentState state;
  KVSTASH_ASSIGN_OR_RETURN(
      std::vector<KvChunk> chunks,
      codec_->Restore(tokens.first(lookup.chain_tokens), lookup.keys, payloads, record, &state, &rs));
  out->decode_ms = Ms(t1, Clock::now());
  out->predictor_ms = rs.predictor_ms;
  if (codec_->stores_state() && state.boundary_tokens != restore_tokens) {
    return Status::Mismatch("the stored state holds token " + std::to_string(state.boundary_tokens) +
                            ", the restore ends at " + std::to_string(restore_tokens));
  }

  const auto t2 = Clock::now();
  // Keep exactly restore_tokens tokens (a fully stored prompt keeps its last token out).
  uint64_t covered = 0;
  std::vector<KvChunk> keep;
  for (KvChunk& c : chunks) {
    if (covered >= restore_tokens) break;
    if (covered + c.tokens > restore_tokens) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk head,
                               SliceTokens(c, 0, static_cast<uint32_t>(restore_tokens - covered)));
      covered = restore_tokens;
      keep.push_back(std::move(head));
      break;
    }
    covered += c.tokens;
    keep.push_back(std::move(c));
  }
  if (covered != restore_tokens) {
    return Status::Internal("restored chunks cover " + std::to_string(covered) + " tokens, not " +
                            std::to_string(restore_tokens));
  }
  const Status imp = codec_->stores_state() ? engine_->ImportKvAndState(keep, state)
                                            : engine_->ImportKv(keep, restore_tokens);
  out->import_ms = Ms(t2, Clock::now());
  return imp;
}

void EngineSession::QueuePutCounted(std::span<const uint32_t> tokens, const ChainLookup& chain,
                                    EvalResult* out) {
  const Status put = QueuePut(tokens, chain, chain.matched_chunks, out);
  if (put.ok()) return;
  MutexLock lock(mu_);
  ++stats_.puts_failed;
  if (first_put_error_.ok()) first_put_error_ = put;
}

Status EngineSession::QueuePut(std::span<const uint32_t> tokens, const ChainLookup& chain,
                               uint32_t first_chunk, EvalResult* out) {
  const std::vector<ChunkKey>& keys = chain.keys;
  if (first_chunk >= keys.size()) return Status::Ok();
  const auto t0 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(KvChunk kv, engine_->ExportKv());
  if (kv.tokens != tokens.size()) {
    return Status::Internal("exported state holds " + std::to_string(kv.tokens) + " tokens, the prompt " +
                            std::to_string(tokens.size()));
  }
  PutJob job;
  job.tokens.assign(tokens.begin(), tokens.begin() + chain.chain_tokens);
  job.keys = keys;
  job.first_chunk = first_chunk;
  const uint32_t n = static_cast<uint32_t>(keys.size());
  uint32_t begin = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (i >= first_chunk) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk c, SliceTokens(kv, begin, keys[i].tokens));
      job.chunks.push_back(std::move(c));
      job.states.emplace_back();
      if (codec_->StateAfterChunk(i, n)) {
        KVSTASH_ASSIGN_OR_RETURN(job.states.back(), engine_->ExportState(begin + keys[i].tokens));
      }
    }
    begin += keys[i].tokens;
  }
  out->export_ms = Ms(t0, Clock::now());
  out->queued_chunks = static_cast<uint32_t>(job.chunks.size());
  MutexLock lock(mu_);
  cv_.wait(lock.native(),
           [&]() KVSTASH_REQUIRES(mu_) { return queue_.size() < options_.max_queued_puts || stop_; });
  queue_.push_back(std::move(job));
  cv_.notify_all();
  return Status::Ok();
}

void EngineSession::PutLoop() {
  MutexLock lock(mu_);
  for (;;) {
    cv_.wait(lock.native(), [&]() KVSTASH_REQUIRES(mu_) { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    PutJob job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    cv_.notify_all();  // room in the queue
    lock.Unlock();

    ChunkEncodeStats es;
    Status st;
    uint64_t ok = 0;
    const auto t0 = Clock::now();
    auto puts = codec_->Encode(job.tokens, job.keys, job.chunks, job.states, job.first_chunk, &es);
    const auto t1 = Clock::now();
    if (!puts.ok()) {
      st = puts.status().WithContext("encode");
    } else {
      // In chain order: each chunk's parent is stored before it.
      for (const PutChunk& p : *puts) {
        st = client_->Put(p, options_.call);
        if (!st.ok()) break;
        ++ok;
      }
    }

    const auto t2 = Clock::now();
    if (puts.ok()) {
      uint64_t tokens = 0;
      for (const KvChunk& c : job.chunks) tokens += c.tokens;
      cost_->ObserveEncode(tokens, es.stored_bytes, std::chrono::duration<double>(t1 - t0).count());
    }
    lock.Lock();
    busy_ = false;
    stats_.encode_ms += Ms(t0, t1);
    stats_.put_ms += Ms(t1, t2);
    stats_.puts_ok += ok;
    if (!st.ok()) {
      ++stats_.puts_failed;
      if (first_put_error_.ok()) first_put_error_ = st;
    }
    if (puts.ok()) {
      stats_.put_raw_bytes += es.raw_bytes;
      stats_.put_payload_bytes += es.stored_bytes;
      stats_.states_put += es.states;
      stats_.put_state_raw_bytes += es.state_raw_bytes;
      stats_.put_state_stored_bytes += es.state_stored_bytes;
    }
    cv_.notify_all();
  }
}

Status EngineSession::Flush() {
  MutexLock lock(mu_);
  cv_.wait(lock.native(), [&]() KVSTASH_REQUIRES(mu_) { return queue_.empty() && !busy_; });
  Status st = first_put_error_;
  first_put_error_ = Status::Ok();
  return st;
}

}  // namespace kvstash::session
