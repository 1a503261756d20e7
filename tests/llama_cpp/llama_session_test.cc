// LlamaSession against a real kvstash-server process and the real libllama + SmolLM2:
// a miss prefills and PUTs; the same prompt then restores all but its last token, and a
// prompt sharing the first chunks restores those; each hit's logits are bit-identical
// to a fresh context that prefills the same tokens with the same batch split. Raw
// coding, f16 and bf16 KV (type_k/type_v), both flash-attention settings. A chunk
// removed between LOOKUP and GET makes the hit fall back to a full prefill (never a
// partial import).
#include "engines/llama_cpp/llama_session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/server/server_process.h"
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

  std::unique_ptr<LlamaSession> MakeSession(bool fa, DType dt) {
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
    auto s = LlamaSession::Create(model_, params, client_,
                                  std::shared_ptr<const PrefixCodec>(std::move(codec).value()));
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

  for (bool fa : {false, true}) {
    for (DType dt : {DType::kF16, DType::kBF16}) {
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
      ASSERT_OK_AND_ASSIGN(EvalResult part, session->EvaluatePrompt(other));
      EXPECT_OK(part.fallback);
      EXPECT_EQ(part.restored_tokens, 3 * kChunk);
      EXPECT_EQ(part.evaluated_tokens, other.size() - 3 * kChunk);
      EXPECT_TRUE(Same(part.logits, Reference(fa, dt, other, 3 * kChunk)));
      ASSERT_OK(session->Flush());
      EXPECT_GT(part.queued_chunks, 0u);
      ASSERT_OK_AND_ASSIGN(LlamaLookup again, session->Lookup(other));
      EXPECT_EQ(again.matched_chunks, again.keys.size());
    }
  }
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

}  // namespace
}  // namespace kvstash::llama_cpp
