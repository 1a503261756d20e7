// PrefixCodec (client/include/kvstash/prefix_codec.h) on SmolLM2-135M and real text:
// chain keys, raw/spec/dckv round trips of prefix chains (sizes 1, C-1, C, C+1, several
// chunks + a partial one) and the errors of damaged or foreign payloads.
#include "kvstash/prefix_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "codec/dckv/dckv_calibration.h"
#include "codec/spec/spec_calibration.h"
#include "kvstash/payload_format.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/kv_cache.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"
#include "tests/support/test_util.h"

namespace kvstash {
namespace {

constexpr uint32_t kC = 64;            // chunk tokens in these tests
constexpr uint32_t kN = 200;           // 3 full chunks + a partial one of 8 tokens
constexpr uint64_t kBytesPerToken = 23040;  // 30 layers * 2 (K, V) * 3 heads * 64 * 2 B

struct Shared {
  std::unique_ptr<model::Model> model;
  std::vector<uint32_t> tokens;      // kN evaluation tokens
  model::KvCache exact;              // their fp32 cache
  std::vector<uint32_t> cal_tokens;  // 128 calibration tokens
  model::KvCache cal_exact;
  std::vector<std::vector<float>> cal_k_pre_rope;
  std::shared_ptr<const model::SpecPredictor> predictor;
  Digest256 fingerprint{};
};

class PrefixCodecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) return;
    s_ = new Shared;
    auto m = model::LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    s_->model = std::move(*m);
    for (auto [split, n, toks, cache] : {std::tuple{model::CorpusSplit::kEvaluation, kN, &s_->tokens, &s_->exact},
                                         std::tuple{model::CorpusSplit::kCalibration, 128u, &s_->cal_tokens,
                                                    &s_->cal_exact}}) {
      auto corpus = model::LoadCorpus(*s_->model->tokenizer, split, n, n);
      ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
      *toks = corpus->documents[0].tokens;
      ASSERT_EQ(toks->size(), n);
      *cache = model::KvCache::ForModel(s_->model->config);
      model::PrefillOptions po;
      po.logits = model::PrefillOptions::Logits::kNone;
      po.keep_pre_rope_k = true;
      auto r = model::Prefill(*s_->model, *toks, cache, po);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (cache == &s_->cal_exact) s_->cal_k_pre_rope = std::move(r->k_pre_rope);
    }
    auto p = model::SpecPredictor::Create(*s_->model, {});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    s_->predictor = std::move(*p);
    for (size_t i = 0; i < s_->fingerprint.size(); ++i) s_->fingerprint[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  static void TearDownTestSuite() {
    delete s_;
    s_ = nullptr;
  }
  void SetUp() override {
    if (s_ == nullptr) GTEST_SKIP() << "models/SmolLM2-135M-Instruct.Q4_1.gguf absent: run scripts/setup.sh";
  }

  PrefixCodecOptions Options(PrefixCodecKind kind) const {
    PrefixCodecOptions o;
    o.kind = kind;
    o.model_fingerprint = s_->fingerprint;
    o.chunk_tokens = kC;
    o.tenant = "team-a";
    return o;
  }

  // A spec artifact calibrated on the 128 calibration tokens (two 64-token chunks).
  static spec::SpecArtifact SpecArtifact() {
    const auto& mc = s_->model->config;
    const KvLayout L{mc.n_layers, mc.n_kv_heads, mc.head_dim, DType::kBF16};
    model::PredictorCache pred;
    EXPECT_OK(s_->predictor->Run(s_->cal_tokens, &pred));
    spec::CalibrationOptions co;
    co.contexts.dtype = DType::kBF16;
    co.predictor_digest = s_->predictor->Digest();
    co.predictor_variant = s_->predictor->options().VariantName();
    auto cb = spec::SpecCalibrator::Create(L, co);
    EXPECT_TRUE(cb.ok());
    std::vector<KvChunk> chunks;
    std::vector<spec::PredictedChunk> preds;
    for (uint32_t b = 0; b < 128; b += kC) {
      chunks.push_back(*model::ToKvChunk(s_->cal_exact, b, b + kC, DType::kBF16));
      spec::PredictedChunk p;
      p.tokens = kC;
      for (uint32_t l = 0; l < L.n_layers; ++l) {
        p.k.push_back(pred.k[l].data() + b * L.n_kv_heads * L.head_dim);
        p.v.push_back(pred.v[l].data() + b * L.n_kv_heads * L.head_dim);
      }
      preds.push_back(p);
    }
    for (size_t i = 0; i < chunks.size(); ++i) EXPECT_OK(cb->AddVariance(chunks[i].view(), preds[i]));
    EXPECT_OK(cb->FreezeSigma());
    for (size_t i = 0; i < chunks.size(); ++i) EXPECT_OK(cb->AddHistogram(chunks[i].view(), preds[i]));
    auto a = cb->Build();
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return std::move(*a);
  }

  // A dckv artifact (one layer per group, raw head 4, raw tail 16) from the calibration rows.
  static dckv::DckvArtifact DckvArtifact() {
    const auto& mc = s_->model->config;
    dckv::DckvRows rows;
    rows.n_layers = mc.n_layers;
    rows.n_kv_heads = mc.n_kv_heads;
    rows.head_dim = mc.head_dim;
    rows.rows = 128;
    rows.k = s_->cal_k_pre_rope;
    rows.v = s_->cal_exact.v;
    auto basis = dckv::FitDckvBasis(rows, 1);
    EXPECT_TRUE(basis.ok()) << basis.status().ToString();
    dckv::DckvRateOptions ro;
    ro.target_ratio = 4;
    ro.rope_theta = mc.rope_theta;
    ro.raw_head = 4;
    ro.raw_tail = 16;
    auto a = dckv::MakeDckvArtifact(*basis, ro);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return std::move(*a);
  }

  // The bf16 chunk of the exact cache that chunk i of an n-token prefix holds.
  static KvChunk ExactChunk(uint32_t n, uint32_t i) {
    return *model::ToKvChunk(s_->exact, i * kC, std::min(n, (i + 1) * kC), DType::kBF16);
  }

  static std::vector<std::vector<uint8_t>> Payloads(const std::vector<PutChunk>& puts) {
    std::vector<std::vector<uint8_t>> p;
    for (const auto& c : puts) p.push_back(c.payload);
    return p;
  }

  static inline Shared* s_ = nullptr;
};

TEST_F(PrefixCodecTest, ChainKeysAreTheKeySpecsWithPartialChunk) {
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  Namespace ns;
  ns.model_fingerprint = ToHex(s_->fingerprint);
  ns.layout = {30, 3, 64, DType::kBF16};
  ns.chunk_tokens = kC;
  ns.tenant = "team-a";
  ns.codec_id = "raw";
  ASSERT_OK_AND_ASSIGN(Digest256 want_ns, NamespaceDigest(ns));
  EXPECT_EQ(raw->namespace_digest(), want_ns);
  ASSERT_OK_AND_ASSIGN(auto keys, raw->ChainKeys(s_->tokens, ChainInputs::TokensOnly()));
  ASSERT_OK_AND_ASSIGN(auto want, ComputeChunkKeys(want_ns, s_->tokens, kC, true));
  ASSERT_EQ(keys.size(), 4u);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(keys[i].digest, want[i].digest);
  EXPECT_EQ(keys[3].tokens, kN - 3 * kC);
  EXPECT_TRUE(keys[3].partial);
  const auto chain = PrefixCodec::LookupChain(keys);
  ASSERT_EQ(chain.size(), 4u);
  EXPECT_EQ(chain[2].key, keys[2].stored());
  EXPECT_EQ(chain[3].tokens, 8u);
  EXPECT_EQ(raw->TokensOfChunks(kN, 2), 128u);
  EXPECT_EQ(raw->TokensOfChunks(kN, 4), kN);
  // Salt and tenant separate namespaces.
  auto o = Options(PrefixCodecKind::kRaw);
  o.cache_salt = "run-2";
  ASSERT_OK_AND_ASSIGN(auto salted, PrefixCodec::CreateRaw(*s_->model, o));
  EXPECT_NE(salted->namespace_digest(), raw->namespace_digest());
  EXPECT_STATUS(raw->ChainKeys({}, ChainInputs::TokensOnly()), kInvalidArgument);
}

// Every field of docs/format/keys.md reaches the namespace: two LoRA adapters on one
// base model, two tensor-parallel shards, two KV dtypes never share keys.
TEST_F(PrefixCodecTest, EveryNamespaceFieldSeparatesChains) {
  ASSERT_OK_AND_ASSIGN(auto base, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  Namespace ns;
  ns.model_fingerprint = ToHex(s_->fingerprint);
  ns.layout = {30, 3, 64, DType::kF16};
  ns.chunk_tokens = kC;
  ns.tenant = "team-a";
  ns.codec_id = "raw";
  ns.tp_rank = 1;
  ns.tp_size = 2;
  ns.adapter_name = "sql-lora";
  ns.adapter_id = "7";
  ns.adapter_digest = "d1";
  ASSERT_OK_AND_ASSIGN(Digest256 want, NamespaceDigest(ns));
  auto o = Options(PrefixCodecKind::kRaw);
  o.kv_dtype = DType::kF16;
  o.tp_rank = 1;
  o.tp_size = 2;
  o.adapter_name = "sql-lora";
  o.adapter_id = "7";
  o.adapter_digest = "d1";
  ASSERT_OK_AND_ASSIGN(auto all, PrefixCodec::CreateRaw(*s_->model, o));
  EXPECT_EQ(all->namespace_digest(), want);
  EXPECT_EQ(all->layout().dtype, DType::kF16);
  std::set<Digest256> seen{base->namespace_digest(), all->namespace_digest()};
  // One field at a time differs from `all`.
  for (int f = 0; f < 5; ++f) {
    auto v = o;
    if (f == 0) v.adapter_digest = "d2";   // same adapter name and id, other weights
    if (f == 1) v.adapter_id = "8";
    if (f == 2) v.tp_rank = 0;
    if (f == 3) v.kv_dtype = DType::kBF16;
    if (f == 4) v.adapter_name = "";
    ASSERT_OK_AND_ASSIGN(auto c, PrefixCodec::CreateRaw(*s_->model, v));
    EXPECT_TRUE(seen.insert(c->namespace_digest()).second) << "field " << f;
  }
  auto bad = o;
  bad.tp_rank = 2;
  EXPECT_STATUS(PrefixCodec::CreateRaw(*s_->model, bad), kInvalidArgument);
  bad = o;
  bad.kv_dtype = DType::kFP8E4M3;
  EXPECT_STATUS(PrefixCodec::CreateRaw(*s_->model, bad), kInvalidArgument);
}

// Prompt-embedding requests (token ids all 0) or images: the extra keys separate them.
TEST_F(PrefixCodecTest, ExtraKeysSeparateEqualTokenIds) {
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  const std::vector<uint32_t> zeros(kC + 10, 0);  // chain of 2 chunks
  ASSERT_OK_AND_ASSIGN(auto plain, raw->ChainKeys(zeros, ChainInputs::TokensOnly()));
  ASSERT_OK_AND_ASSIGN(auto a, raw->ChainKeys(zeros, ChainInputs::WithExtraKeys({{"emb-a"}, {}})));
  ASSERT_OK_AND_ASSIGN(auto b, raw->ChainKeys(zeros, ChainInputs::WithExtraKeys({{"emb-b"}, {}})));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_NE(a[0].digest, b[0].digest);
  EXPECT_NE(a[1].digest, b[1].digest);  // chained: chunk 1 differs too
  EXPECT_NE(a[0].digest, plain[0].digest);
  // The same as the key scheme computes it.
  ASSERT_OK_AND_ASSIGN(auto want, ComputeChunkKeys(raw->namespace_digest(), zeros, kC, true,
                                                   std::vector<std::vector<std::string>>{{"emb-a"}, {}}));
  EXPECT_EQ(a[1].digest, want[1].digest);
  // One list per chunk, no more and no fewer (an empty list is not "tokens only").
  EXPECT_STATUS(raw->ChainKeys(zeros, ChainInputs::WithExtraKeys({{"emb-a"}})), kInvalidArgument);
  EXPECT_STATUS(raw->ChainKeys(zeros, ChainInputs::WithExtraKeys({})), kInvalidArgument);
}

// The engine form: canonical chunks in, verified canonical chunks out, f16 or bf16,
// without a model (raw) and with one (spec), equal to the fp32-cache form.
TEST_F(PrefixCodecTest, KvChunkFormRoundTripsF16WithoutModel) {
  auto o = Options(PrefixCodecKind::kRaw);
  o.kv_dtype = DType::kF16;
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(KvLayout{30, 3, 64, DType::kBF16}, o));
  EXPECT_EQ(raw->layout().dtype, DType::kF16);
  ASSERT_OK_AND_ASSIGN(auto with_model, PrefixCodec::CreateRaw(*s_->model, o));
  EXPECT_EQ(raw->namespace_digest(), with_model->namespace_digest());
  const auto inputs = ChainInputs::WithExtraKeys({{"img"}, {}, {}, {}});
  ASSERT_OK_AND_ASSIGN(auto keys, raw->ChainKeys(s_->tokens, inputs));
  std::vector<KvChunk> chunks;
  for (uint32_t i = 0; i < 4; ++i) {
    chunks.push_back(*model::ToKvChunk(s_->exact, i * kC, std::min(kN, (i + 1) * kC), DType::kF16));
  }
  ASSERT_OK_AND_ASSIGN(auto puts, raw->EncodeKvChunks(s_->tokens, keys, std::span(chunks).subspan(1), 1));
  ASSERT_EQ(puts.size(), 3u);
  EXPECT_EQ(puts[0].key, keys[1].stored());
  EXPECT_EQ(*puts[0].parent, keys[0].stored());
  ASSERT_OK_AND_ASSIGN(auto all, raw->EncodeKvChunks(s_->tokens, keys, chunks, 0));
  ASSERT_OK_AND_ASSIGN(auto back, raw->RestoreKvChunks(s_->tokens, keys, Payloads(all)));
  ASSERT_EQ(back.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(back[i].data, chunks[i].data) << "chunk " << i;
  // The fp32 forms need a model.
  EXPECT_STATUS(raw->EncodeChunks(s_->tokens, s_->exact, 0), kInvalidArgument);
  EXPECT_STATUS(raw->Restore(s_->tokens, Payloads(all)), kInvalidArgument);
  // Wrong chunk dtype, wrong count, keys of another prefix: refused.
  std::vector<KvChunk> bf16{*model::ToKvChunk(s_->exact, 3 * kC, kN, DType::kBF16)};
  EXPECT_STATUS(raw->EncodeKvChunks(s_->tokens, keys, bf16, 3), kInvalidArgument);
  EXPECT_STATUS(raw->EncodeKvChunks(s_->tokens, keys, std::span(chunks).subspan(2), 1), kInvalidArgument);
  EXPECT_STATUS(raw->RestoreKvChunks(std::span(s_->tokens).first(kC), keys, Payloads(all)), kInvalidArgument);
  // A bf16 payload is not an f16 chain's.
  ASSERT_OK_AND_ASSIGN(auto bf, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  ASSERT_OK_AND_ASSIGN(auto bf_puts, bf->EncodeChunks(s_->tokens, s_->exact, 0));
  EXPECT_STATUS(raw->RestoreKvChunks(s_->tokens, keys, Payloads(bf_puts)), kMismatch);
}

// ViewRawKvChunks from any chain position (first_chunk: the vLLM connector verifies each
// chunk as its GET completes): the views are the chunks put, in place (no copy), and
// a payload at another position, a damaged one or one past the chain's end is refused.
TEST_F(PrefixCodecTest, RawViewsVerifyEachChunkAtItsChainPosition) {
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  ASSERT_OK_AND_ASSIGN(auto keys, raw->ChainKeys(s_->tokens, ChainInputs::TokensOnly()));
  std::vector<KvChunk> chunks;
  for (uint32_t i = 0; i < 4; ++i)
    chunks.push_back(*model::ToKvChunk(s_->exact, i * kC, std::min(kN, (i + 1) * kC), DType::kBF16));
  ASSERT_OK_AND_ASSIGN(auto puts, raw->EncodeKvChunks(s_->tokens, keys, chunks, 0));
  const auto p = Payloads(puts);
  std::vector<std::span<const uint8_t>> spans(p.begin(), p.end());
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(auto one, raw->ViewRawKvChunks(s_->tokens, keys, std::span(spans).subspan(i, 1), i));
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].tokens, keys[i].tokens);
    EXPECT_EQ(one[0].data.data(), p[i].data() + kPayloadHeaderBytes) << "a view of payload " << i;
    EXPECT_TRUE(
        std::equal(one[0].data.begin(), one[0].data.end(), chunks[i].data.begin(), chunks[i].data.end()));
  }
  ASSERT_OK_AND_ASSIGN(auto tail, raw->ViewRawKvChunks(s_->tokens, keys, std::span(spans).subspan(2), 2));
  EXPECT_EQ(tail.size(), 2u);
  EXPECT_STATUS(raw->ViewRawKvChunks(s_->tokens, keys, std::span(spans).subspan(2, 1), 1), kMismatch);
  EXPECT_STATUS(raw->ViewRawKvChunks(s_->tokens, keys, std::span(spans).subspan(2), 3), kInvalidArgument);
  EXPECT_STATUS(raw->ViewRawKvChunks(s_->tokens, keys, std::span(spans).subspan(3), 5), kInvalidArgument);
  auto damaged = p[1];
  damaged[kPayloadHeaderBytes + 1000] ^= 1;
  const std::span<const uint8_t> bad[] = {damaged};
  EXPECT_STATUS(raw->ViewRawKvChunks(s_->tokens, keys, bad, 1), kCorruption);
}

TEST_F(PrefixCodecTest, SpecKvChunkFormEqualsCacheForm) {
  ASSERT_OK_AND_ASSIGN(auto spec, PrefixCodec::CreateSpec(*s_->model, s_->predictor, SpecArtifact(),
                                                          Options(PrefixCodecKind::kSpec)));
  ASSERT_OK_AND_ASSIGN(auto keys, spec->ChainKeys(s_->tokens, ChainInputs::TokensOnly()));
  std::vector<KvChunk> chunks;
  for (uint32_t i = 0; i < 4; ++i) chunks.push_back(ExactChunk(kN, i));
  ASSERT_OK_AND_ASSIGN(auto a, spec->EncodeKvChunks(s_->tokens, keys, chunks, 0));
  ASSERT_OK_AND_ASSIGN(auto b, spec->EncodeChunks(s_->tokens, s_->exact, 0));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].payload, b[i].payload) << "chunk " << i;
  const auto payloads = Payloads(a);
  ASSERT_OK_AND_ASSIGN(auto back, spec->RestoreKvChunks(s_->tokens, keys, std::span(payloads).first(3)));
  ASSERT_EQ(back.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(back[i].data, chunks[i].data) << "chunk " << i;
  // A spec codec for f16 KV needs an f16-calibrated artifact.
  auto o = Options(PrefixCodecKind::kSpec);
  o.kv_dtype = DType::kF16;
  EXPECT_STATUS(PrefixCodec::CreateSpec(*s_->model, s_->predictor, SpecArtifact(), o), kInvalidArgument);
}

TEST_F(PrefixCodecTest, RawRoundTripSizeSweep) {
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  for (uint32_t n : {1u, kC - 1, kC, kC + 1, kN}) {
    SCOPED_TRACE(n);
    const std::span<const uint32_t> tokens(s_->tokens.data(), n);
    ASSERT_OK_AND_ASSIGN(model::KvCache exact, s_->exact.Prefix(n));
    PrefixEncodeStats es;
    ASSERT_OK_AND_ASSIGN(auto puts, raw->EncodeChunks(tokens, exact, 0, &es));
    const uint32_t chunks = (n + kC - 1) / kC;
    ASSERT_EQ(puts.size(), chunks);
    EXPECT_EQ(es.raw_bytes, n * kBytesPerToken);
    EXPECT_EQ(es.stored_bytes, n * kBytesPerToken + chunks * kPayloadHeaderBytes);
    ASSERT_OK_AND_ASSIGN(auto keys, raw->ChainKeys(tokens, ChainInputs::TokensOnly()));
    for (uint32_t i = 0; i < chunks; ++i) {
      EXPECT_EQ(puts[i].route, keys[0].stored());
      EXPECT_EQ(puts[i].key, keys[i].stored());
      EXPECT_EQ(puts[i].parent.has_value(), i > 0);
      if (i > 0) {
        EXPECT_EQ(*puts[i].parent, keys[i - 1].stored());
      }
      ASSERT_OK_AND_ASSIGN(PayloadHeader h, ParsePayloadHeader(puts[i].payload));
      EXPECT_EQ(h.token_offset, i * kC);
      EXPECT_EQ((h.flags & kPayloadFlagPartialChunk) != 0, keys[i].partial);
    }
    PrefixRestoreStats rs;
    ASSERT_OK_AND_ASSIGN(RestoredPrefix r, raw->Restore(tokens, Payloads(puts), &rs));
    ASSERT_EQ(r.chunks.size(), chunks);
    for (uint32_t i = 0; i < chunks; ++i) EXPECT_EQ(r.chunks[i].data, ExactChunk(n, i).data) << "chunk " << i;
    EXPECT_EQ(r.cache->tokens, n);
    // The fp32 cache holds the bf16 values: |x - bf16(x)| <= 2^-8 |x|.
    for (uint32_t l : {0u, 29u}) {
      for (size_t j = 0; j < r.cache->k[l].size(); ++j) {
        ASSERT_LE(std::fabs(r.cache->k[l][j] - exact.k[l][j]), std::ldexp(std::fabs(exact.k[l][j]), -8));
      }
    }
    // Only the first chunk(s): a prefix hit.
    if (chunks > 1) {
      auto p = Payloads(puts);
      p.pop_back();
      ASSERT_OK_AND_ASSIGN(RestoredPrefix part, raw->Restore(tokens, p));
      EXPECT_EQ(part.cache->tokens, (chunks - 1) * kC);
    }
  }
}

TEST_F(PrefixCodecTest, RawErrorsNeverReturnKv) {
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  ASSERT_OK_AND_ASSIGN(auto puts, raw->EncodeChunks(s_->tokens, s_->exact, 0));
  auto p = Payloads(puts);
  EXPECT_STATUS(raw->Restore(s_->tokens, {}), kInvalidArgument);
  auto five = p;
  five.push_back(p[0]);
  EXPECT_STATUS(raw->Restore(s_->tokens, five), kInvalidArgument);
  auto swapped = p;
  std::swap(swapped[0], swapped[1]);
  EXPECT_STATUS(raw->Restore(s_->tokens, swapped), kMismatch);  // token offsets disagree
  auto damaged = p;
  damaged[1][kPayloadHeaderBytes + 1000] ^= 1;
  EXPECT_STATUS(raw->Restore(s_->tokens, damaged), kCorruption);
  auto o = Options(PrefixCodecKind::kRaw);
  o.model_fingerprint[0] ^= 1;
  ASSERT_OK_AND_ASSIGN(auto other_model, PrefixCodec::CreateRaw(*s_->model, o));
  EXPECT_STATUS(other_model->Restore(s_->tokens, p), kMismatch);
  // Encoding: a short cache, a chunk beyond the chain; the end of the chain is nothing to do.
  ASSERT_OK_AND_ASSIGN(model::KvCache short_cache, s_->exact.Prefix(kN - 1));
  EXPECT_STATUS(raw->EncodeChunks(s_->tokens, short_cache, 0), kInvalidArgument);
  EXPECT_STATUS(raw->EncodeChunks(s_->tokens, s_->exact, 5), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto none, raw->EncodeChunks(s_->tokens, s_->exact, 4));
  EXPECT_TRUE(none.empty());
  ASSERT_OK_AND_ASSIGN(auto tail, raw->EncodeChunks(s_->tokens, s_->exact, 2));
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].payload, p[2]);
  // Wrong factory for the options' kind.
  EXPECT_STATUS(PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kSpec)), kInvalidArgument);
}

// Payloads of another chain at the same positions: a storage, server or proxy fault
// answering chunk i of prefix A with chunk i of prefix D. D's payloads are valid (they
// restore D; same codec, model, layout, token counts and offsets as A's), so before
// payload format version 2 every check passed and Restore returned D's KV as A's.
// Check exercised: PrefixCodec::CheckHeader's CheckPayloadKey(header, chain key i)
// (client/prefix_codec.cc), run by Restore, RestoreKvChunks and CheckRestoreInputs.
// Without it the Corruption expectations below fail (Ok, with D's KV), and the unbound
// (version-1) payload is no longer Mismatch.
TEST_F(PrefixCodecTest, PayloadsOfAnotherChainAreCorruptionAndUnboundOnesMismatch) {
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  // A: the first 128 evaluation tokens; D: the 128 calibration tokens (another text).
  // Both are two full chunks.
  const std::span<const uint32_t> a(s_->tokens.data(), 2 * kC);
  const std::span<const uint32_t> d(s_->cal_tokens);
  ASSERT_EQ(d.size(), a.size());
  ASSERT_OK_AND_ASSIGN(model::KvCache a_exact, s_->exact.Prefix(2 * kC));
  ASSERT_OK_AND_ASSIGN(auto a_puts, raw->EncodeChunks(a, a_exact, 0));
  ASSERT_OK_AND_ASSIGN(auto d_puts, raw->EncodeChunks(d, s_->cal_exact, 0));
  ASSERT_OK_AND_ASSIGN(auto a_keys, raw->ChainKeys(a, ChainInputs::TokensOnly()));
  ASSERT_OK_AND_ASSIGN(auto d_keys, raw->ChainKeys(d, ChainInputs::TokensOnly()));
  const auto pa = Payloads(a_puts), pd = Payloads(d_puts);
  ASSERT_EQ(pa.size(), 2u);
  ASSERT_EQ(pd.size(), 2u);

  // D's payloads are valid, at A's positions, and hold other KV.
  ASSERT_OK(raw->RestoreKvChunks(d, d_keys, pd));
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(PayloadHeader ha, ParsePayloadHeader(pa[i]));
    ASSERT_OK_AND_ASSIGN(PayloadHeader hd, ParsePayloadHeader(pd[i]));
    EXPECT_EQ(hd.token_offset, ha.token_offset);
    EXPECT_EQ(hd.tokens, ha.tokens);
    EXPECT_EQ(hd.layout, ha.layout);
    EXPECT_EQ(hd.model_fingerprint, ha.model_fingerprint);
    EXPECT_NE(hd.content_checksum, ha.content_checksum);
    EXPECT_TRUE(hd.chunk_key == d_keys[i].stored());
  }
  ASSERT_OK(raw->Restore(a, pa));  // A's own payloads restore A

  // All of D's payloads for A: refused, nothing returned.
  EXPECT_STATUS(raw->Restore(a, pd), kCorruption);
  EXPECT_STATUS(raw->RestoreKvChunks(a, a_keys, pd), kCorruption);
  EXPECT_STATUS(raw->CheckRestoreInputs(a, a_keys, pd), kCorruption);
  // One chunk substituted (the second): refused too.
  const std::vector<std::vector<uint8_t>> mixed{pa[0], pd[1]};
  EXPECT_STATUS(raw->Restore(a, mixed), kCorruption);
  EXPECT_STATUS(raw->RestoreKvChunks(a, a_keys, mixed), kCorruption);

  // A's own chunk 0 as an unbound (version-1) payload: same body, no key. It cannot be
  // tied to its key: Mismatch, never KV.
  ASSERT_OK_AND_ASSIGN(PayloadView v, ParsePayload(pa[0]));
  PayloadHeader h = v.header;
  h.chunk_key.reset();
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> unbound, BuildPayload(h, v.body));
  ASSERT_EQ(unbound.size(), pa[0].size() - (kPayloadHeaderBytes - kPayloadHeaderBytesUnbound));
  const std::vector<std::vector<uint8_t>> with_unbound{unbound, pa[1]};
  EXPECT_STATUS(raw->Restore(a, with_unbound), kMismatch);
  EXPECT_STATUS(raw->RestoreKvChunks(a, a_keys, with_unbound), kMismatch);
  EXPECT_STATUS(raw->CheckRestoreInputs(a, a_keys, with_unbound), kMismatch);
}

TEST_F(PrefixCodecTest, SpecRestoresBitExactAndRefusesForeignPayloads) {
  spec::SpecArtifact art = SpecArtifact();
  ASSERT_OK_AND_ASSIGN(auto spec, PrefixCodec::CreateSpec(*s_->model, s_->predictor, art, Options(PrefixCodecKind::kSpec)));
  EXPECT_EQ(spec->artifact_digest(), art.Digest());
  ASSERT_OK_AND_ASSIGN(auto raw, PrefixCodec::CreateRaw(*s_->model, Options(PrefixCodecKind::kRaw)));
  EXPECT_NE(spec->namespace_digest(), raw->namespace_digest());
  PrefixEncodeStats es;
  ASSERT_OK_AND_ASSIGN(auto puts, spec->EncodeChunks(s_->tokens, s_->exact, 0, &es));
  ASSERT_EQ(puts.size(), 4u);
  EXPECT_EQ(es.raw_bytes, kN * kBytesPerToken);
  // Lossless and smaller (measured on this text: ~3x; 2x is a loose floor).
  EXPECT_LT(es.stored_bytes * 2, es.raw_bytes);
  EXPECT_GT(es.predictor_ms, 0);
  PrefixRestoreStats rs;
  ASSERT_OK_AND_ASSIGN(RestoredPrefix r, spec->Restore(s_->tokens, Payloads(puts), &rs));
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(r.chunks[i].data, ExactChunk(kN, i).data) << "chunk " << i;
  EXPECT_GT(rs.predictor_ms, 0);
  // The first two chunks alone (the predictor runs over their 128 tokens only).
  auto p = Payloads(puts);
  ASSERT_OK_AND_ASSIGN(RestoredPrefix two, spec->Restore(s_->tokens, std::span(p).first(2)));
  EXPECT_EQ(two.cache->tokens, 128u);
  EXPECT_EQ(two.chunks[1].data, ExactChunk(kN, 1).data);
  // Other tokens than the encoder's: from chunk 1 on, the payloads are bound to the keys
  // of the encoder's tokens, not of these: Corruption, before any prediction runs. (A
  // predictor that disagrees on the same tokens is Mismatch: determinism_tests.)
  auto tokens = s_->tokens;
  tokens[70] = tokens[70] == 1 ? 2 : 1;
  EXPECT_STATUS(spec->Restore(tokens, p), kCorruption);
  // A raw payload is not a spec payload.
  ASSERT_OK_AND_ASSIGN(auto raw_puts, raw->EncodeChunks(s_->tokens, s_->exact, 0));
  EXPECT_STATUS(spec->Restore(s_->tokens, Payloads(raw_puts)), kMismatch);
  // A predictor with other options is not the artifact's.
  model::SpecPredictorOptions po;
  po.activation_bits = 8;
  ASSERT_OK_AND_ASSIGN(auto other, model::SpecPredictor::Create(*s_->model, po));
  EXPECT_STATUS(PrefixCodec::CreateSpec(*s_->model, std::move(other), art, Options(PrefixCodecKind::kSpec)), kMismatch);
}

TEST_F(PrefixCodecTest, DckvIsLossyWithinBoundsAndExactOnRawRows) {
  ASSERT_OK_AND_ASSIGN(auto dckv, PrefixCodec::CreateDckv(*s_->model, DckvArtifact(), Options(PrefixCodecKind::kDckv)));
  PrefixEncodeStats es;
  ASSERT_OK_AND_ASSIGN(auto puts, dckv->EncodeChunks(s_->tokens, s_->exact, 0, &es));
  EXPECT_LT(es.stored_bytes, es.raw_bytes);
  ASSERT_OK_AND_ASSIGN(RestoredPrefix r, dckv->Restore(s_->tokens, Payloads(puts)));
  ASSERT_EQ(r.cache->tokens, kN);
  // Raw rows: positions [0, 4) and [kN - 16, kN) are the exact bf16 values.
  const size_t row = 3 * 64 * 2;  // bytes of one position of K_l (or V_l)
  const KvChunk first = ExactChunk(kN, 0), last = ExactChunk(kN, 3);
  for (uint32_t l = 0; l < 30; ++l) {
    auto got = r.chunks[0].view().K(l), want = first.view().K(l);
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + 4 * row, want.begin())) << "layer " << l;
    auto got_tail = r.chunks[3].view().V(l), want_tail = last.view().V(l);
    EXPECT_TRUE(std::equal(got_tail.begin(), got_tail.end(), want_tail.begin())) << "layer " << l;  // 8 tail rows
  }
  // Coded rows: relative RMS error of the whole cache well below 1 (rate 4x).
  double err = 0, ref = 0;
  for (uint32_t l = 0; l < 30; ++l) {
    for (size_t j = 0; j < r.cache->v[l].size(); ++j) {
      err += std::pow(r.cache->v[l][j] - s_->exact.v[l][j], 2) + std::pow(r.cache->k[l][j] - s_->exact.k[l][j], 2);
      ref += std::pow(s_->exact.v[l][j], 2) + std::pow(s_->exact.k[l][j], 2);
    }
  }
  EXPECT_GT(err, 0);
  EXPECT_LT(std::sqrt(err / ref), 0.25);
  // A damaged payload is refused.
  auto p = Payloads(puts);
  p[1].back() ^= 0x40;
  EXPECT_STATUS(dckv->Restore(s_->tokens, p), kCorruption);
}

}  // namespace
}  // namespace kvstash
