// LlamaSession against a real kvstash-server process and the real libllama + SmolLM2:
// a miss prefills and PUTs; the same prompt then restores all but its last token, and a
// prompt sharing the first chunks restores those; each hit's logits are bit-identical
// to a fresh context that prefills the same tokens with the same batch split. Raw
// coding, f16 and bf16 KV (type_k/type_v), both flash-attention settings (f16); spec coding
// (our deterministic predictor on both sides, an artifact calibrated on llama.cpp's own
// KV of another text) for f16 and bf16, lossless, with the same logits. A chunk removed
// between LOOKUP and GET makes the hit fall back to a full prefill (never a partial
// import); so does a proxy (tests/support/fault_proxy.h) that answers the GETs of one
// document's chunks with another document's valid payloads (Corruption).
#include "engines/llama_cpp/llama_session.h"
#include "common/kv_chunk_slice.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec/spec/spec_calibration.h"
#include "model/formats/model_loader.h"
#include "model/predictor/spec_predictor.h"
#include "tests/server/server_process.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/test_util.h"

namespace kvstash::llama_cpp {
namespace {

using server::testing::ServerProcess;
using server::testing::TempDir;

// Real text: the start of the GPL-3 preamble and of the Apache-2.0 licence.
constexpr const char* kDoc =
    "The GNU General Public License is a free, copyleft license for software and other "
    "kinds of works. The licenses for most software and other practical works are designed "
    "to take away your freedom to share and change the works. By contrast, the GNU General "
    "Public License is intended to guarantee your freedom to share and change all versions "
    "of a program--to make sure it remains free software for all its users.";
constexpr const char* kOther =
    " Licensed under the Apache License, Version 2.0; you may not use this file except in "
    "compliance with the License.";

constexpr uint32_t kChunk = 16;

class LlamaSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InitLlamaBackend();
    model_ = LoadModel(testing::SourceDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf")
                 .value()
                 .release();
  }
  static void TearDownTestSuite() { llama_model_free(model_); }

  void SetUp() override {
    ASSERT_OK(server_.Start(KVSTASH_SERVER_BIN, dir_.path(),
                            {"--tenant", "t=secret", "--data-dir", dir_.path() + "/db",
                             "--memory-budget", "67108864"}));
    ClientOptions o;
    o.servers = {server_.address()};
    o.tenant = "t";
    o.credential = "secret";
    o.max_attempts = 1;
    auto c = Client::Create(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::shared_ptr<Client>(std::move(c).value());
  }

  // A client of the server (or of another address, such as a proxy in front of it).
  std::shared_ptr<Client> MakeClient(const std::string& address) {
    ClientOptions o;
    o.servers = {address};
    o.tenant = "t";
    o.credential = "secret";
    o.max_attempts = 1;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::shared_ptr<Client>(std::move(c).value()) : nullptr;
  }

  // Sessions that must exercise the load path restore every hit (the cost model's
  // decision, which depends on this machine's speed, is tested on its own below).
  static LlamaSessionOptions AlwaysRestore() {
    LlamaSessionOptions o;
    o.restore_cost.policy = RestoreCostOptions::Policy::kAlways;
    return o;
  }

  // client: the session's client (default: client_, straight to the server).
  std::unique_ptr<LlamaSession> MakeSession(bool fa, DType dt, std::shared_ptr<Client> client = nullptr,
                                            LlamaSessionOptions options = AlwaysRestore()) {
    const auto params = ContextParams(256, 1, fa, dt).value();
    const StateLayout layout = StateLayoutOf(model_, params).value();
    PrefixCodecOptions po;
    po.kind = PrefixCodecKind::kRaw;
    po.chunk_tokens = kChunk;
    po.tenant = "t";
    po.kv_dtype = dt;
    po.model_fingerprint[0] = 0x5a;  // any digest of the weights; the same on both sides
    po.cache_salt = std::string(fa ? "fa" : "nofa");
    auto codec = PrefixCodec::CreateRaw(layout.kv, po);
    EXPECT_TRUE(codec.ok()) << codec.status().ToString();
    auto s = LlamaSession::Create(model_, params, client ? client : client_,
                                  std::shared_ptr<const PrefixCodec>(std::move(codec).value()), options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  // A fresh context that evaluates tokens [0, split) then [split, n): the reference.
  static std::vector<float> Reference(bool fa, DType dt, std::span<const llama_token> tokens,
                                      size_t split) {
    auto ctx = NewContext(model_, ContextParams(256, 1, fa, dt).value()).value();
    if (split > 0) EXPECT_OK(Evaluate(ctx.get(), tokens.first(split), 0));
    return Evaluate(ctx.get(), tokens.subspan(split), static_cast<llama_pos>(split)).value();
  }

  static bool Same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }

  static inline llama_model* model_ = nullptr;
  TempDir dir_;
  ServerProcess server_;
  std::shared_ptr<Client> client_;
};

TEST_F(LlamaSessionTest, MissThenHitGivesLogitsOfAFullPrefill) {
  const std::vector<llama_token> doc = Tokenize(model_, kDoc).value();
  ASSERT_GE(doc.size(), 3 * kChunk + 2);
  std::vector<llama_token> other(doc.begin(), doc.begin() + 3 * kChunk);
  const std::vector<llama_token> tail = Tokenize(model_, kOther).value();
  other.insert(other.end(), tail.begin(), tail.end());
  const uint32_t n = static_cast<uint32_t>(doc.size());
  const uint32_t chain = (n + kChunk - 1) / kChunk;

  // f16 and bf16 without flash attention (transposed V), f16 with it (row-major V).
  for (auto [fa, dt] : {std::pair{false, DType::kF16}, std::pair{false, DType::kBF16},
                        std::pair{true, DType::kF16}}) {
    {
      SCOPED_TRACE(std::string(fa ? "flash_attn on " : "flash_attn off ") +
                   std::string(DTypeName(dt)));
      auto session = MakeSession(fa, dt);
      ASSERT_TRUE(session);
      // Miss: everything evaluated, the whole chain (full chunks + partial) put.
      ASSERT_OK_AND_ASSIGN(EvalResult miss, session->EvaluatePrompt(doc));
      EXPECT_OK(miss.fallback);
      EXPECT_EQ(miss.restored_tokens, 0u);
      EXPECT_EQ(miss.evaluated_tokens, n);
      EXPECT_EQ(miss.queued_chunks, chain);
      EXPECT_TRUE(Same(miss.logits, Reference(fa, dt, doc, 0)));
      ASSERT_OK(session->Flush());
      EXPECT_EQ(session->stats().puts_ok, chain);

      // The same prompt: all but the last token restored.
      ASSERT_OK_AND_ASSIGN(EvalResult hit, session->EvaluatePrompt(doc));
      EXPECT_OK(hit.fallback);
      EXPECT_EQ(hit.restored_chunks, chain);
      EXPECT_EQ(hit.restored_tokens, n - 1);
      EXPECT_EQ(hit.evaluated_tokens, 1u);
      EXPECT_EQ(hit.queued_chunks, 0u);
      EXPECT_EQ(hit.get_payload_bytes > uint64_t{n} * 23040, true);
      EXPECT_TRUE(Same(hit.logits, Reference(fa, dt, doc, n - 1)));

      // A prompt sharing the first 3 chunks: those restored, the rest evaluated and put.
      // The restored KV is the first prompt's (computed in a batch of n tokens): the
      // logits equal a context that prefilled that prompt, dropped positions >= 48 and
      // evaluated the rest. With flash attention on and f16 KV, llama.cpp's CPU kernel
      // for a batch of >= Q_TILE queries (tiled) rounds differently from the one for
      // smaller batches, so a fresh prefill of the 48 shared tokens alone gives other
      // bits: a property of the engine (the KV of a prefix depends on the batch it was
      // computed in), not of the restore. Elsewhere both references agree.
      ASSERT_OK_AND_ASSIGN(EvalResult part, session->EvaluatePrompt(other));
      EXPECT_OK(part.fallback);
      EXPECT_EQ(part.restored_tokens, 3 * kChunk);
      EXPECT_EQ(part.evaluated_tokens, other.size() - 3 * kChunk);
      {
        auto ctx = NewContext(model_, ContextParams(256, 1, fa, dt).value()).value();
        ASSERT_OK(Evaluate(ctx.get(), doc, 0));
        ASSERT_TRUE(llama_memory_seq_rm(llama_get_memory(ctx.get()), 0, 3 * kChunk, -1));
        ASSERT_OK_AND_ASSIGN(auto want, Evaluate(ctx.get(), std::span(other).subspan(3 * kChunk), 3 * kChunk));
        EXPECT_TRUE(Same(part.logits, want));
      }
      if (!(fa && dt == DType::kF16)) {
        EXPECT_TRUE(Same(part.logits, Reference(fa, dt, other, 3 * kChunk)));
      }
      ASSERT_OK(session->Flush());
      EXPECT_GT(part.queued_chunks, 0u);
      ASSERT_OK_AND_ASSIGN(LlamaLookup again, session->Lookup(other));
      EXPECT_EQ(again.matched_chunks, again.keys.size());
    }
  }
}

// chain_tokens: two prompts that share a prefix of 3.5 chunks (a "document") and differ
// after it (the "question"). Chained on the whole prompt, only the 3 full chunks hit;
// chained on the shared prefix, the prefix's partial last chunk hits too, the question
// is never stored, and the logits still equal a fresh prefill with the same split.
TEST_F(LlamaSessionTest, ChainTokensStoresAndRestoresTheSharedPrefix) {
  const std::vector<llama_token> doc = Tokenize(model_, kDoc).value();
  ASSERT_GE(doc.size(), 4 * kChunk);
  const uint32_t prefix = 3 * kChunk + kChunk / 2;
  const std::vector<llama_token> q1 = Tokenize(model_, " Question: what is it?").value();
  const std::vector<llama_token> q2 = Tokenize(model_, " Question: who wrote it?").value();
  std::vector<llama_token> a(doc.begin(), doc.begin() + prefix), b = a;
  a.insert(a.end(), q1.begin(), q1.end());
  b.insert(b.end(), q2.begin(), q2.end());
  auto session = MakeSession(false, DType::kF16);
  ASSERT_TRUE(session);
  EXPECT_STATUS(session->EvaluatePrompt(a, static_cast<uint32_t>(a.size() + 1)).status(),
                kInvalidArgument);

  ASSERT_OK_AND_ASSIGN(EvalResult miss, session->EvaluatePrompt(a, prefix));
  EXPECT_EQ(miss.restored_tokens, 0u);
  EXPECT_EQ(miss.queued_chunks, 4u);  // 3 full chunks + the 8-token partial one
  ASSERT_OK(session->Flush());
  ASSERT_OK_AND_ASSIGN(LlamaLookup whole, session->Lookup(b));
  EXPECT_EQ(whole.chain_tokens, b.size());
  EXPECT_EQ(whole.matched_chunks, 3u);  // the whole-prompt chain's 4th chunk holds q2
  ASSERT_OK_AND_ASSIGN(LlamaLookup shared, session->Lookup(b, prefix));
  EXPECT_EQ(shared.chain_tokens, prefix);
  EXPECT_EQ(shared.matched_chunks, 4u);
  EXPECT_EQ(shared.matched_tokens, prefix);

  ASSERT_OK_AND_ASSIGN(EvalResult hit, session->RestoreHit(b, shared));
  EXPECT_OK(hit.fallback);
  EXPECT_EQ(hit.restored_tokens, prefix);
  EXPECT_EQ(hit.evaluated_tokens, b.size() - prefix);
  EXPECT_EQ(hit.queued_chunks, 0u);  // the prefix is stored; the question never is
  EXPECT_TRUE(Same(hit.logits, Reference(false, DType::kF16, b, prefix)));
  // A lookup of another prompt is refused, not trusted.
  EXPECT_STATUS(session->RestoreHit(std::span(b).first(prefix - 1), shared).status(),
                kInvalidArgument);
}

// spec: the payloads are coded against our runtime's deterministic predictor of the
// same weights; the artifact is calibrated on llama.cpp's KV of another text (the
// Apache-2.0 sentence and the GPL-3 text backwards, so no chunk is shared).
TEST_F(LlamaSessionTest, SpecMissThenHitIsLosslessAndLogitIdentical) {
  auto ours = model::LoadModel(testing::SourceDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  std::shared_ptr<const model::Model> m(std::move(ours).value());
  ASSERT_OK_AND_ASSIGN(auto pred_u, model::SpecPredictor::Create(*m, {}));
  std::shared_ptr<const model::SpecPredictor> predictor(std::move(pred_u));
  const std::vector<llama_token> doc = Tokenize(model_, kDoc).value();
  std::vector<llama_token> cal = Tokenize(model_, kOther).value();
  cal.insert(cal.end(), doc.rbegin(), doc.rend());
  const std::vector<uint32_t> cal_ids(cal.begin(), cal.end());
  model::PredictorCache cal_pred;
  ASSERT_OK(predictor->Run(cal_ids, &cal_pred));

  for (DType dt : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    const auto params = ContextParams(256, 1, false, dt).value();
    const StateLayout layout = StateLayoutOf(model_, params).value();
    // Calibration pairs: llama.cpp's KV of the calibration text, the predictor's K/V.
    auto cctx = NewContext(model_, params).value();
    ASSERT_OK(Evaluate(cctx.get(), cal, 0));
    ASSERT_OK_AND_ASSIGN(auto cal_state, ExportSeqState(cctx.get()));
    ASSERT_OK_AND_ASSIGN(SeqState cal_kv, ParseSeqState(cal_state, layout));
    spec::PredictedChunk pc;
    pc.tokens = cal_kv.kv.tokens;
    for (uint32_t l = 0; l < layout.kv.n_layers; ++l) {
      pc.k.push_back(cal_pred.k[l].data());
      pc.v.push_back(cal_pred.v[l].data());
    }
    spec::CalibrationOptions co;
    co.contexts.dtype = dt;
    co.contexts.buckets = 32;
    co.predictor_digest = predictor->Digest();
    co.predictor_variant = predictor->options().VariantName();
    co.threads = 1;
    ASSERT_OK_AND_ASSIGN(auto cb, spec::SpecCalibrator::Create(layout.kv, co));
    ASSERT_OK(cb.AddVariance(cal_kv.kv.view(), pc));
    ASSERT_OK(cb.FreezeSigma());
    ASSERT_OK(cb.AddHistogram(cal_kv.kv.view(), pc));
    ASSERT_OK_AND_ASSIGN(spec::SpecArtifact art, cb.Build());

    PrefixCodecOptions po;
    po.kind = PrefixCodecKind::kSpec;
    po.chunk_tokens = kChunk;
    po.tenant = "t";
    po.kv_dtype = dt;
    po.model_fingerprint[0] = 0x5b;
    ASSERT_OK_AND_ASSIGN(auto codec, PrefixCodec::CreateSpec(*m, predictor, std::move(art), po));
    ASSERT_OK_AND_ASSIGN(auto session, LlamaSession::Create(model_, params, client_,
                                                            std::shared_ptr<const PrefixCodec>(std::move(codec)),
                                                            AlwaysRestore()));
    ASSERT_OK_AND_ASSIGN(EvalResult miss, session->EvaluatePrompt(doc));
    EXPECT_EQ(miss.restored_tokens, 0u);
    ASSERT_OK(session->Flush());
    const LlamaSessionStats st = session->stats();
    EXPECT_LT(st.put_payload_bytes, st.put_raw_bytes) << "spec stores fewer bytes than raw";
    ASSERT_OK_AND_ASSIGN(EvalResult hit, session->EvaluatePrompt(doc));
    EXPECT_OK(hit.fallback);
    EXPECT_EQ(hit.restored_tokens, doc.size() - 1);
    EXPECT_TRUE(Same(hit.logits, Reference(false, dt, doc, doc.size() - 1)));
    // Losslessness itself: the restored n-1 tokens' KV equals a full prefill's.
    ASSERT_OK_AND_ASSIGN(auto restored, ExportSeqState(session->context()));
    auto fresh = NewContext(model_, params).value();
    ASSERT_OK(Evaluate(fresh.get(), doc, 0));
    ASSERT_OK_AND_ASSIGN(auto full, ExportSeqState(fresh.get()));
    ASSERT_OK_AND_ASSIGN(SeqState a, ParseSeqState(restored, layout));
    ASSERT_OK_AND_ASSIGN(SeqState b, ParseSeqState(full, layout));
    const uint32_t r = static_cast<uint32_t>(doc.size() - 1);
    EXPECT_EQ(SliceTokens(a.kv, 0, r).value().data, SliceTokens(b.kv, 0, r).value().data);
  }
}

// The cost model decides EvaluatePrompt's hits: fed rates under which a restore costs
// more than llama.cpp's prefill, the hit is declined (a miss with the same logits, no
// chunk re-put); fed rates under which it costs less, the hit is restored, and the
// restore becomes a sample of the model.
TEST_F(LlamaSessionTest, CostModelDeclinesHitsThatDoNotPay) {
  const std::vector<llama_token> doc = Tokenize(model_, kDoc).value();
  const uint32_t n = static_cast<uint32_t>(doc.size());
  // A full window (8) of each sample, so that the session's own measurements (one miss)
  // cannot move the medians.
  auto slow = std::make_shared<RestoreCostModel>();
  for (int i = 0; i < 8; ++i) {
    slow->ObservePrefill(1000, 0.001);     // prefill 1 us/token
    slow->ObserveEncode(1000, 1000, 1.0);  // decode proxy 1 ms/token: never pays
  }
  LlamaSessionOptions so;
  so.cost_model = slow;
  auto session = MakeSession(false, DType::kF16, nullptr, so);
  ASSERT_TRUE(session);
  ASSERT_OK_AND_ASSIGN(EvalResult miss, session->EvaluatePrompt(doc));
  EXPECT_FALSE(miss.declined);
  ASSERT_OK(session->Flush());
  const uint64_t puts = session->stats().puts_ok;
  ASSERT_OK_AND_ASSIGN(EvalResult declined, session->EvaluatePrompt(doc));
  EXPECT_TRUE(declined.declined);
  EXPECT_FALSE(declined.estimate.take);
  EXPECT_TRUE(declined.estimate.informed);
  EXPECT_EQ(declined.estimate.tokens, n - 1);
  EXPECT_GT(declined.estimate.restore_s, declined.estimate.recompute_s);
  EXPECT_EQ(declined.restored_tokens, 0u);
  EXPECT_EQ(declined.evaluated_tokens, n);
  EXPECT_TRUE(Same(declined.logits, Reference(false, DType::kF16, doc, 0)));
  ASSERT_OK(session->Flush());
  LlamaSessionStats st = session->stats();
  EXPECT_EQ(st.declined_hits, 1u);
  EXPECT_EQ(st.declined_tokens, n - 1);
  EXPECT_EQ(st.hits, 0u);
  EXPECT_EQ(st.puts_ok, puts) << "a declined hit's chunks are stored already";

  // Restores that pay: the prefill rate is far above any decode rate the model knows.
  auto fast = std::make_shared<RestoreCostModel>();
  for (int i = 0; i < 8; ++i) {
    fast->ObservePrefill(1000, 1000.0);
    fast->ObserveEncode(1000, 1000, 0.001);
  }
  so.cost_model = fast;
  auto session2 = MakeSession(false, DType::kF16, nullptr, so);
  ASSERT_TRUE(session2);
  ASSERT_OK_AND_ASSIGN(EvalResult hit, session2->EvaluatePrompt(doc));
  EXPECT_FALSE(hit.declined);
  EXPECT_TRUE(hit.estimate.take);
  EXPECT_EQ(hit.restored_tokens, n - 1);
  EXPECT_TRUE(Same(hit.logits, Reference(false, DType::kF16, doc, n - 1)));
  EXPECT_EQ(fast->rates().decode_samples, 1u) << "the restore is measured";
  EXPECT_EQ(session2->stats().declined_hits, 0u);
}

TEST_F(LlamaSessionTest, ChunkGoneBetweenLookupAndGetFallsBackToFullPrefill) {
  const std::vector<llama_token> doc = Tokenize(model_, kDoc).value();
  auto session = MakeSession(false, DType::kF16);
  ASSERT_TRUE(session);
  ASSERT_OK(session->EvaluatePrompt(doc));
  ASSERT_OK(session->Flush());
  ASSERT_OK_AND_ASSIGN(LlamaLookup lookup, session->Lookup(doc));
  ASSERT_EQ(lookup.matched_chunks, lookup.keys.size());
  // Chunk 2 and its descendants disappear (eviction between LOOKUP and GET).
  ASSERT_OK_AND_ASSIGN(bool existed, client_->Delete(lookup.keys[0].stored(), lookup.keys[2].stored()));
  EXPECT_TRUE(existed);
  ASSERT_OK_AND_ASSIGN(EvalResult r, session->RestoreHit(doc, lookup));
  EXPECT_STATUS(r.fallback, kNotFound);
  EXPECT_EQ(r.restored_tokens, 0u);
  EXPECT_EQ(r.evaluated_tokens, doc.size());
  EXPECT_TRUE(Same(r.logits, Reference(false, DType::kF16, doc, 0)));
  EXPECT_EQ(session->stats().fallbacks, 1u);
}

// Two documents A and D of the same length are stored; the session's client then goes
// through a fault-injection proxy that forwards the GET of each of A's chunks as the
// GET of D's chunk at the same position, so every reply is a valid payload (codec,
// layout, model, token count and offset all A's chunk's) of the other document. The
// restore must be refused (fallback Corruption), the prompt recomputed: logits of a
// fresh prefill, counted in fallbacks_corruption.
// Checks exercised: the payload's chunk key, by Client::GetAsync's CheckPayloadKey
// (client/client.cc) and, behind it, PrefixCodec::RestoreKvChunks' CheckHeader
// (client/prefix_codec.cc). The test fails only if BOTH are removed (either one alone
// refuses the payloads): tests/client/client_fault_test.cc and prefix_codec_test.cc
// cover each on its own. Without them the hit imports D's KV for A's tokens.
TEST_F(LlamaSessionTest, AnotherDocumentsPayloadsFallBackAsCorruption) {
  const std::vector<llama_token> doc_a = Tokenize(model_, kDoc).value();
  // D: another text (the Apache-2.0 sentence, then the GPL-3 text) cut to A's length, so
  // its chain has the same chunks and token counts.
  std::vector<llama_token> doc_d = Tokenize(model_, kOther).value();
  const std::vector<llama_token> more = Tokenize(model_, kDoc).value();
  doc_d.insert(doc_d.end(), more.begin(), more.end());
  ASSERT_GE(doc_d.size(), doc_a.size());
  doc_d.resize(doc_a.size());
  ASSERT_NE(doc_d[0], doc_a[0]);

  {  // Store both (straight to the server).
    auto writer = MakeSession(false, DType::kF16);
    ASSERT_TRUE(writer);
    ASSERT_OK(writer->EvaluatePrompt(doc_a));
    ASSERT_OK(writer->EvaluatePrompt(doc_d));
    ASSERT_OK(writer->Flush());
  }
  ASSERT_OK_AND_ASSIGN(auto proxy, testing::FaultProxy::Start(server_.address()));
  auto session = MakeSession(false, DType::kF16, MakeClient(proxy->address()));
  ASSERT_TRUE(session);
  ASSERT_OK_AND_ASSIGN(LlamaLookup la, session->Lookup(doc_a));
  ASSERT_OK_AND_ASSIGN(LlamaLookup ld, session->Lookup(doc_d));
  ASSERT_EQ(la.matched_chunks, la.keys.size());
  ASSERT_EQ(ld.matched_chunks, ld.keys.size());
  ASSERT_EQ(la.keys.size(), ld.keys.size());
  for (size_t i = 0; i < la.keys.size(); ++i) {
    ASSERT_EQ(la.keys[i].tokens, ld.keys[i].tokens) << "chunk " << i;
    ASSERT_NE(la.keys[i].stored(), ld.keys[i].stored()) << "chunk " << i;
  }

  // Through the proxy without rules: a hit, as straight to the server.
  ASSERT_OK_AND_ASSIGN(EvalResult clean, session->RestoreHit(doc_a, la));
  EXPECT_OK(clean.fallback);
  EXPECT_EQ(clean.restored_tokens, doc_a.size() - 1);
  EXPECT_TRUE(Same(clean.logits, Reference(false, DType::kF16, doc_a, doc_a.size() - 1)));
  EXPECT_EQ(session->stats().fallbacks, 0u);

  // substitute A_i -> D_i: every GET of A's chunks is answered with D's chunk.
  for (size_t i = 0; i < la.keys.size(); ++i) proxy->Substitute(la.keys[i].stored(), ld.keys[i].stored());
  ASSERT_OK_AND_ASSIGN(EvalResult r, session->RestoreHit(doc_a, la));
  EXPECT_EQ(proxy->substituted(), la.keys.size()) << "every GET of A's chunks is substituted";
  EXPECT_STATUS(r.fallback, kCorruption);
  EXPECT_EQ(r.restored_tokens, 0u);
  EXPECT_EQ(r.restored_chunks, 0u);
  EXPECT_EQ(r.evaluated_tokens, doc_a.size());
  EXPECT_TRUE(Same(r.logits, Reference(false, DType::kF16, doc_a, 0)));
  const LlamaSessionStats st = session->stats();
  EXPECT_EQ(st.fallbacks, 1u);
  EXPECT_EQ(st.fallbacks_corruption, 1u);
  EXPECT_EQ(st.fallbacks_mismatch, 0u);
  // D itself still restores through the proxy (its GETs are not substituted).
  ASSERT_OK_AND_ASSIGN(EvalResult own_d, session->RestoreHit(doc_d, ld));
  EXPECT_OK(own_d.fallback);
  EXPECT_EQ(own_d.restored_tokens, doc_d.size() - 1);
}

TEST_F(LlamaSessionTest, CodecOfAnotherLayoutIsRefused) {
  const auto params = ContextParams(64, 1, false, DType::kF16).value();
  PrefixCodecOptions po;
  po.kind = PrefixCodecKind::kRaw;
  po.kv_dtype = DType::kBF16;  // the context stores f16
  auto codec = PrefixCodec::CreateRaw(KvLayout{30, 3, 64, DType::kBF16}, po);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  auto s = LlamaSession::Create(model_, params, client_,
                                std::shared_ptr<const PrefixCodec>(std::move(codec).value()));
  EXPECT_STATUS(s, kInvalidArgument);
}

TEST_F(LlamaSessionTest, BadRestoreCostOptionsAreRefused) {
  const auto params = ContextParams(64, 1, false, DType::kF16).value();
  PrefixCodecOptions po;
  po.kind = PrefixCodecKind::kRaw;
  po.kv_dtype = DType::kF16;
  auto codec = PrefixCodec::CreateRaw(KvLayout{30, 3, 64, DType::kF16}, po);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  LlamaSessionOptions options;
  options.restore_cost.margin = 0;  // would take every hit however slow: refused at Create
  auto s = LlamaSession::Create(model_, params, client_,
                                std::shared_ptr<const PrefixCodec>(std::move(codec).value()), options);
  EXPECT_STATUS(s, kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::llama_cpp
