// Hybrid prefixes through a real kvstash-server process on loopback: the tiny
// Qwen3.5's KV chunks and recurrent-state records are PUT with the client library,
// LOOKUP with require_state stops at the last boundary that has a state, GET returns
// payload + state byte-exact, and the restored state continues to the same logits and
// greedy tokens as an uninterrupted run. A corrupt state never restores: the server
// refuses it on PUT (so that boundary is never a hit), and a record damaged after GET
// fails its checksum in RestoreStoredBoundary (the engine's miss). spec-coded KV and
// state (model/hybrid/hybrid_spec.h) take the same path and decode client-side to the
// exact tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "kvstash/client.h"
#include "kvstash/payload_format.h"
#include "kvstash/prefix_key.h"
#include "model/hybrid/hybrid_spec.h"
#include "model/hybrid/hybrid_stored.h"
#include "tests/model/hybrid/tiny_qwen35.h"
#include "tests/server/server_process.h"

namespace kvstash::hybrid {
namespace {

using kvstash::server::testing::ServerProcess;
using kvstash::server::testing::TempDir;
using kvstash::testing::Greedy;
using kvstash::testing::TinyQwen35Dir;

constexpr uint32_t kChunk = 16;
constexpr int kGreedy = 10;

class HybridServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(model_, kvstash::testing::LoadTinyQwen35());
    const auto t = kvstash::testing::LoadTinyQwen35Tokens();
    prefix_ = t.prefix;
    request_ = t.prefix;
    request_.insert(request_.end(), t.continuation.begin(), t.continuation.end());

    Namespace ns;
    ns.model_fingerprint.assign(model_->fingerprint().begin(), model_->fingerprint().end());
    ns.layout = HybridKvLayout(model_->config());
    ns.chunk_tokens = kChunk;
    ns.codec_id = "raw";
    ASSERT_OK_AND_ASSIGN(ns_, NamespaceDigest(ns));

    StartServer();
  }

  // (Re)starts the server on the test's data directory and connects a client.
  void StartServer() {
    ASSERT_OK(server_.Start(
        KVSTASH_SERVER_BIN, dir_.path(),
        {"--tenant", "a=pa", "--data-dir", dir_.path() + "/db", "--memory-budget", "67108864"}));
    ClientOptions o;
    o.servers = {server_.address()};
    o.tenant = "a";
    o.credential = "pa";
    o.max_attempts = 1;
    ASSERT_OK_AND_ASSIGN(client_, Client::Create(o));
  }

  std::vector<ChunkKey> Keys(std::span<const uint32_t> tokens) const {
    return ComputeChunkKeys(ns_, tokens, kChunk, /*include_partial=*/true).value();
  }

  std::vector<ChunkRef> Chain(std::span<const uint32_t> tokens) const {
    std::vector<ChunkRef> chain;
    for (const ChunkKey& k : Keys(tokens)) chain.push_back({k.stored(), k.tokens});
    return chain;
  }

  // Runs `tokens` from the empty state; the state and (optionally) every row of logits.
  HybridState Run(std::span<const uint32_t> tokens, std::vector<float>* logits = nullptr) const {
    HybridState s = HybridState::Empty(model_->config());
    if (logits) logits->resize(tokens.size() * model_->config().vocab_size);
    EXPECT_OK(model_->EvalSequence(tokens, &s, logits ? std::span<float>(*logits) : std::span<float>()));
    return s;
  }

  // PUTs the full chunks of `tokens`, with a state record on the chunks that end at
  // one of `state_at` (token counts). Returns the stored forms by boundary (payloads
  // bound to their keys, as stored and as a GET returns them).
  void PutPrefix(std::span<const uint32_t> tokens, std::vector<uint32_t> state_at) {
    const auto keys = Keys(tokens);
    for (size_t i = 0; i < keys.size() && !keys[i].partial; ++i) {
      const uint32_t end = static_cast<uint32_t>((i + 1) * kChunk);
      const HybridState s = Run(tokens.first(end));
      ASSERT_OK_AND_ASSIGN(StoredBoundary b, EncodeStoredBoundary(*model_, s, kChunk));
      for (size_t j = 0; j < b.kv_payloads.size(); ++j) {
        ASSERT_OK_AND_ASSIGN(b.kv_payloads[j], BindPayloadToKey(b.kv_payloads[j], keys[j].stored()));
      }
      PutChunk p;
      p.route = keys[0].stored();
      p.key = keys[i].stored();
      if (i > 0) p.parent = keys[i - 1].stored();
      p.payload = b.kv_payloads[i];
      if (std::find(state_at.begin(), state_at.end(), end) != state_at.end()) {
        p.state_record = b.state_record;
        stored_[end] = b;
      }
      ASSERT_OK(client_->Put(p));
    }
  }

  // GETs chunks [0, n) of `tokens` (state of the last one) and restores.
  Result<HybridState> Fetch(std::span<const uint32_t> tokens, uint32_t n,
                            std::vector<std::vector<uint8_t>>* payloads, std::vector<uint8_t>* state) {
    const auto keys = Keys(tokens);
    payloads->clear();
    for (uint32_t i = 0; i < n; ++i) {
      GetOptions g;
      g.with_state = i + 1 == n;
      KVSTASH_ASSIGN_OR_RETURN(GetResult r, client_->Get(keys[0].stored(), keys[i].stored(), g));
      payloads->push_back(std::move(r.payload));
      if (g.with_state) *state = std::move(r.state_record);
    }
    return RestoreStoredBoundary(*model_, *payloads, *state);
  }

  TempDir dir_;
  ServerProcess server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<HybridModel> model_;
  Digest256 ns_{};
  std::vector<uint32_t> prefix_, request_;
  std::map<uint32_t, StoredBoundary> stored_;
};

TEST_F(HybridServerTest, LookupStopsAtAStateAndTheRestoredStateContinuesExactly) {
  // States every 2 chunks (32 tokens) and at the prefix end (80).
  PutPrefix(prefix_, {32, 64, 80});
  ASSERT_EQ(stored_.size(), 3u);

  // The request (prefix + 12 more tokens): all 5 stored chunks, ending at a state.
  ASSERT_OK_AND_ASSIGN(LookupResult hit, client_->Lookup(Chain(request_), true));
  EXPECT_EQ(hit.matched_chunks, 5u);
  EXPECT_EQ(hit.matched_tokens, 80u);

  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> state;
  ASSERT_OK_AND_ASSIGN(HybridState s, Fetch(request_, hit.matched_chunks, &payloads, &state));
  EXPECT_EQ(payloads, stored_[80].kv_payloads);  // byte-exact
  EXPECT_EQ(state, stored_[80].state_record);

  std::vector<float> full;
  const HybridState full_state = Run(request_, &full);
  const uint64_t v = model_->config().vocab_size;
  std::vector<float> rest((request_.size() - 80) * v);
  ASSERT_OK(model_->EvalSequence(std::span(request_).subspan(80), &s, rest));
  EXPECT_EQ(0, std::memcmp(rest.data(), full.data() + 80 * v, rest.size() * sizeof(float)));
  const std::vector<float> last(full.end() - v, full.end());
  EXPECT_EQ(Greedy(*model_, s, std::vector<float>(rest.end() - v, rest.end()), kGreedy),
            Greedy(*model_, full_state, last, kGreedy));

  // After a drained restart the chunks and states come back from the disk tier.
  client_.reset();
  EXPECT_EQ(server_.Kill(SIGTERM), 0);
  StartServer();
  ASSERT_OK_AND_ASSIGN(LookupResult again, client_->Lookup(Chain(request_), true));
  EXPECT_EQ(again.matched_chunks, 5u);
  ASSERT_OK(Fetch(request_, again.matched_chunks, &payloads, &state).status());
  EXPECT_EQ(payloads, stored_[80].kv_payloads);
  EXPECT_EQ(state, stored_[80].state_record);
}

TEST_F(HybridServerTest, ADivergingRequestResumesFromTheLastStateBeforeIt) {
  PutPrefix(prefix_, {32, 80});
  // Shares the first 48 tokens (3 chunks) with the stored prefix, then differs.
  std::vector<uint32_t> other(prefix_.begin(), prefix_.begin() + 48);
  for (uint32_t i = 0; i < 20; ++i) other.push_back((7 * i + 3) % model_->config().vocab_size);
  ASSERT_OK_AND_ASSIGN(LookupResult any, client_->Lookup(Chain(other), false));
  EXPECT_EQ(any.matched_chunks, 3u);  // KV alone reaches 48 tokens
  ASSERT_OK_AND_ASSIGN(LookupResult hit, client_->Lookup(Chain(other), true));
  EXPECT_EQ(hit.matched_chunks, 2u);  // but the last state is at 32
  EXPECT_EQ(hit.matched_tokens, 32u);

  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> state;
  ASSERT_OK_AND_ASSIGN(HybridState s, Fetch(other, hit.matched_chunks, &payloads, &state));
  EXPECT_EQ(state, stored_[32].state_record);
  std::vector<float> full;
  Run(other, &full);
  const uint64_t v = model_->config().vocab_size;
  std::vector<float> rest((other.size() - 32) * v);
  ASSERT_OK(model_->EvalSequence(std::span(other).subspan(32), &s, rest));
  EXPECT_EQ(0, std::memcmp(rest.data(), full.data() + 32 * v, rest.size() * sizeof(float)));
}

TEST_F(HybridServerTest, ACorruptStateIsNeverAHit) {
  // A state record damaged before PUT (one byte of a delta-state value): the server
  // refuses the PUT, so the chunk and its state are not stored.
  const std::span<const uint32_t> two = std::span(prefix_).first(32);
  const auto keys = Keys(two);
  ASSERT_OK_AND_ASSIGN(StoredBoundary b, EncodeStoredBoundary(*model_, Run(two), kChunk));
  PutChunk first;
  first.route = keys[0].stored();
  first.key = keys[0].stored();
  first.payload = b.kv_payloads[0];
  ASSERT_OK(client_->Put(first));  // chunk 0 without a state
  PutChunk second = first;
  second.key = keys[1].stored();
  second.parent = keys[0].stored();
  second.payload = b.kv_payloads[1];
  second.state_record = b.state_record;
  second.state_record[second.state_record.size() / 2] ^= 0x10;
  const Status put = client_->Put(second);
  EXPECT_EQ(put.code(), Status::Code::kCorruption) << put.ToString();
  ASSERT_OK_AND_ASSIGN(LookupResult miss, client_->Lookup(Chain(two), true));
  EXPECT_EQ(miss.matched_chunks, 0u);  // no boundary with a state: a miss
  EXPECT_EQ(miss.matched_tokens, 0u);

  // The intact record stores; a copy damaged after GET is refused by the restore.
  second.state_record = b.state_record;
  ASSERT_OK(client_->Put(second));
  ASSERT_OK_AND_ASSIGN(LookupResult hit, client_->Lookup(Chain(two), true));
  ASSERT_EQ(hit.matched_chunks, 2u);
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> state;
  ASSERT_OK(Fetch(two, 2, &payloads, &state).status());
  for (size_t i : {size_t{0}, size_t{70}, state.size() / 2, state.size() - 1}) {
    std::vector<uint8_t> bad = state;
    bad[i] ^= 0x01;
    EXPECT_FALSE(RestoreStoredBoundary(*model_, payloads, bad).ok()) << "byte " << i;
  }
}

TEST_F(HybridServerTest, SpecCodedKvAndStateRoundTripThroughTheServer) {
  // spec on the hybrid (hybrid_spec.h): KV payloads (codec spec, f32 layout) and a state
  // record carrying the coded state body, PUT at the prefix end (80 tokens).
  ASSERT_OK_AND_ASSIGN(HybridPredictor predictor, HybridPredictor::Create(*model_, {}));
  std::vector<std::vector<uint32_t>> cal = {request_};
  ASSERT_OK_AND_ASSIGN(spec::SpecStateArtifact artifact, CalibrateHybridSpec(*model_, predictor, cal, 16));
  Namespace ns;
  ns.model_fingerprint.assign(model_->fingerprint().begin(), model_->fingerprint().end());
  ns.layout = HybridKvLayout(model_->config());
  ns.chunk_tokens = kChunk;
  ns.codec_id = "spec";
  ASSERT_OK_AND_ASSIGN(const Digest256 spec_ns, NamespaceDigest(ns));
  ASSERT_OK_AND_ASSIGN(auto keys, ComputeChunkKeys(spec_ns, prefix_, kChunk, true));
  ASSERT_EQ(keys.size(), 5u);
  const HybridState exact = Run(prefix_);
  HybridState pred = HybridState::Empty(model_->config());
  ASSERT_OK(predictor.Eval(prefix_, &pred));
  ASSERT_OK_AND_ASSIGN(RecurrentState es, ExportRecurrentState(model_->config(), exact));
  ASSERT_OK_AND_ASSIGN(RecurrentState ps, ExportRecurrentState(model_->config(), pred));
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> record, EncodeHybridSpecState(*model_, artifact, es, ps));
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t c = 0; c < keys.size(); ++c) {
    PutChunk p;
    p.route = keys[0].stored();
    p.key = keys[c].stored();
    if (c > 0) p.parent = keys[c - 1].stored();
    ASSERT_OK_AND_ASSIGN(
        std::vector<uint8_t> unbound,
        EncodeHybridSpecChunk(*model_, artifact, exact, pred, c * kChunk, (c + 1) * kChunk, false));
    ASSERT_OK_AND_ASSIGN(p.payload, BindPayloadToKey(unbound, p.key));
    sent.push_back(p.payload);
    if (c + 1 == keys.size()) {
      // A damaged record is refused (its record checksum covers the coded body)...
      p.state_record = record;
      p.state_record[p.state_record.size() / 2] ^= 0x08;
      EXPECT_EQ(client_->Put(p).code(), Status::Code::kCorruption);
      p.state_record = record;
    }
    ASSERT_OK(client_->Put(p));
  }
  std::vector<ChunkRef> chain;
  for (const ChunkKey& k : keys) chain.push_back({k.stored(), k.tokens});
  ASSERT_OK_AND_ASSIGN(LookupResult hit, client_->Lookup(chain, true));
  ASSERT_EQ(hit.matched_chunks, 5u);
  std::vector<std::vector<uint8_t>> got;
  std::vector<uint8_t> got_record;
  for (uint32_t c = 0; c < 5; ++c) {
    GetOptions g;
    g.with_state = c == 4;
    ASSERT_OK_AND_ASSIGN(GetResult r, client_->Get(keys[0].stored(), keys[c].stored(), g));
    got.push_back(std::move(r.payload));
    if (g.with_state) got_record = std::move(r.state_record);
  }
  EXPECT_EQ(got, sent);
  EXPECT_EQ(got_record, record);
  // ...and decoded client-side it is the exact state; damaged after GET it never restores.
  ASSERT_OK_AND_ASSIGN(HybridState s,
                       RestoreHybridSpecBoundary(*model_, predictor, artifact, prefix_, got, got_record));
  ASSERT_OK_AND_ASSIGN(RecurrentState back, ExportRecurrentState(model_->config(), s));
  EXPECT_EQ(back, es);
  ASSERT_OK_AND_ASSIGN(KvChunk want_kv, ExportKvChunk(model_->config(), exact, 0, 80));
  ASSERT_OK_AND_ASSIGN(KvChunk got_kv, ExportKvChunk(model_->config(), s, 0, 80));
  EXPECT_EQ(got_kv.data, want_kv.data);
  for (size_t i : {size_t{0}, size_t{100}, got_record.size() - 9}) {
    std::vector<uint8_t> bad = got_record;
    bad[i] ^= 0x01;
    EXPECT_FALSE(RestoreHybridSpecBoundary(*model_, predictor, artifact, prefix_, got, bad).ok()) << i;
  }
}

}  // namespace
}  // namespace kvstash::hybrid
