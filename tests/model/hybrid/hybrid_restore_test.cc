// Continuation from a restored (KV + recurrent state) equals the uninterrupted run, bit
// for bit, on the tiny Qwen3.5 fixture: the state at each boundary goes through the
// stored form (raw KV chunk payloads + EncodeStateRecord bytes) and back.
#include <gtest/gtest.h>

#include <cstring>

#include "kvstash/payload_format.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_stored.h"
#include "tests/model/hybrid/tiny_qwen35.h"

namespace kvstash::hybrid {
namespace {

using kvstash::testing::Greedy;
using kvstash::testing::TinyQwen35Dir;

constexpr uint32_t kChunkTokens = 16;
constexpr int kGreedy = 12;

class HybridRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(model_, kvstash::testing::LoadTinyQwen35());
    const auto t = kvstash::testing::LoadTinyQwen35Tokens();
    tokens_ = t.prefix;
    tokens_.insert(tokens_.end(), t.continuation.begin(), t.continuation.end());
    const uint64_t v = model_->config().vocab_size;
    full_.resize(tokens_.size() * v);
    HybridState s = HybridState::Empty(model_->config());
    ASSERT_OK(model_->EvalSequence(tokens_, &s, full_));
    full_greedy_ = Greedy(*model_, s, Row(full_, tokens_.size() - 1), kGreedy);
    ASSERT_EQ(full_greedy_.size(), static_cast<size_t>(kGreedy));
  }

  std::vector<float> Row(const std::vector<float>& rows, size_t i) const {
    const uint64_t v = model_->config().vocab_size;
    return std::vector<float>(rows.begin() + i * v, rows.begin() + (i + 1) * v);
  }

  // State after tokens_[0, b) in its stored form.
  StoredBoundary Stored(uint32_t b) const {
    HybridState s = HybridState::Empty(model_->config());
    EXPECT_OK(model_->EvalSequence(std::span(tokens_).first(b), &s, {}));
    auto st = EncodeStoredBoundary(*model_, s, kChunkTokens);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? *st : StoredBoundary{};
  }

  std::unique_ptr<HybridModel> model_;
  std::vector<uint32_t> tokens_;
  std::vector<float> full_;  // logits after every token of the uninterrupted run
  std::vector<uint32_t> full_greedy_;
};

TEST_F(HybridRestoreTest, ContinuationFromEveryKindOfBoundaryIsBitIdentical) {
  const uint64_t v = model_->config().vocab_size;
  // 0, 1, around the kvstash chunk (16) and transformers' 64-token chunk, the fixture's
  // prefix end (80), the last token.
  for (uint32_t b : {0u, 1u, 3u, 15u, 16u, 17u, 63u, 64u, 65u, 80u, 91u}) {
    SCOPED_TRACE("boundary " + std::to_string(b));
    const StoredBoundary stored = Stored(b);
    EXPECT_EQ(stored.kv_payloads.size(), (b + kChunkTokens - 1) / kChunkTokens);
    ASSERT_OK_AND_ASSIGN(HybridState s,
                         RestoreStoredBoundary(*model_, stored.kv_payloads, stored.state_record));
    ASSERT_EQ(s.tokens, b);
    const size_t rest = tokens_.size() - b;
    std::vector<float> logits(rest * v);
    ASSERT_OK(model_->EvalSequence(std::span(tokens_).subspan(b), &s, logits));
    EXPECT_EQ(0, std::memcmp(logits.data(), full_.data() + b * v, logits.size() * sizeof(float)));
    EXPECT_EQ(Greedy(*model_, s, Row(logits, rest - 1), kGreedy), full_greedy_);
  }
}

TEST_F(HybridRestoreTest, AStateOneBitOffChangesTheContinuation) {
  const uint32_t b = 80;
  HybridState s = HybridState::Empty(model_->config());
  ASSERT_OK(model_->EvalSequence(std::span(tokens_).first(b), &s, {}));
  ASSERT_OK_AND_ASSIGN(RecurrentState r, ExportRecurrentState(model_->config(), s));
  // layers.1.delta_state element 25: mantissa bit 16 (a relative change of 2^-7; the
  // lowest bits can vanish in rounding, which is why exactness is checked on bytes).
  r.tensors[3].data[102] ^= 0x01;
  std::vector<KvChunk> chunks;
  for (uint32_t begin = 0; begin < b; begin += kChunkTokens) {
    ASSERT_OK_AND_ASSIGN(KvChunk c, ExportKvChunk(model_->config(), s, begin, begin + kChunkTokens));
    chunks.push_back(std::move(c));
  }
  ASSERT_OK_AND_ASSIGN(HybridState bad, ImportState(model_->config(), chunks, r));
  const uint64_t v = model_->config().vocab_size;
  std::vector<float> logits(v);
  ASSERT_OK(model_->Eval(tokens_[b], &bad, logits));
  EXPECT_NE(0, std::memcmp(logits.data(), full_.data() + b * v, v * sizeof(float)));
}

TEST_F(HybridRestoreTest, EveryCorruptByteOfTheStateRecordIsRefused) {
  const StoredBoundary stored = Stored(80);
  ASSERT_GT(stored.state_record.size(), 6u * 1024);  // 3 x (96x3 + 4x16x8) fp32 + header
  for (size_t i = 0; i < stored.state_record.size(); i += 97) {
    std::vector<uint8_t> bad = stored.state_record;
    bad[i] ^= 0x40;
    EXPECT_FALSE(RestoreStoredBoundary(*model_, stored.kv_payloads, bad).ok()) << "byte " << i;
  }
  std::vector<uint8_t> cut(stored.state_record.begin(), stored.state_record.end() - 1);
  EXPECT_STATUS(RestoreStoredBoundary(*model_, stored.kv_payloads, cut), kCorruption);
}

TEST_F(HybridRestoreTest, CorruptMissingOrMisplacedKvIsRefused) {
  const StoredBoundary stored = Stored(80);
  ASSERT_EQ(stored.kv_payloads.size(), 5u);
  auto kv = stored.kv_payloads;
  kv[2][kPayloadHeaderBytesUnbound + 5] ^= 0x01;  // a body byte (unbound payload)
  EXPECT_STATUS(RestoreStoredBoundary(*model_, kv, stored.state_record), kCorruption);
  kv = stored.kv_payloads;
  kv.pop_back();  // chunks end before the state's boundary
  EXPECT_STATUS(RestoreStoredBoundary(*model_, kv, stored.state_record), kCorruption);
  kv = stored.kv_payloads;
  std::swap(kv[0], kv[1]);  // out of order
  EXPECT_STATUS(RestoreStoredBoundary(*model_, kv, stored.state_record), kCorruption);
  // The state of another boundary with these chunks.
  EXPECT_STATUS(RestoreStoredBoundary(*model_, stored.kv_payloads, Stored(64).state_record), kCorruption);
}

TEST_F(HybridRestoreTest, ImportStateRejectsWrongTensors) {
  const HybridConfig& c = model_->config();
  HybridState s = HybridState::Empty(c);
  ASSERT_OK(model_->EvalSequence(std::span(tokens_).first(16), &s, {}));
  ASSERT_OK_AND_ASSIGN(KvChunk kv, ExportKvChunk(c, s, 0, 16));
  ASSERT_OK_AND_ASSIGN(RecurrentState good, ExportRecurrentState(c, s));
  std::vector<KvChunk> chunks = {kv};
  ASSERT_OK_AND_ASSIGN(HybridState back, ImportState(c, chunks, good));
  EXPECT_EQ(back.tokens, s.tokens);
  EXPECT_TRUE(back.layers == s.layers);

  RecurrentState r = good;
  r.tensors.pop_back();
  EXPECT_STATUS(ImportState(c, chunks, r), kInvalidArgument);  // missing
  r = good;
  r.tensors.push_back(r.tensors[0]);
  r.tensors.back().name = "layers.9.conv_state";
  EXPECT_STATUS(ImportState(c, chunks, r), kInvalidArgument);  // extra
  r = good;
  r.tensors[1] = r.tensors[0];
  EXPECT_STATUS(ImportState(c, chunks, r), kInvalidArgument);  // duplicate
  r = good;
  r.tensors[0].shape = {3, 96};
  EXPECT_STATUS(ImportState(c, chunks, r), kInvalidArgument);  // misshapen
  r = good;
  r.tensors[0].dtype = DType::kBF16;
  r.tensors[0].data.resize(r.tensors[0].data.size() / 2);
  EXPECT_STATUS(ImportState(c, chunks, r), kInvalidArgument);  // dtype
  r = good;
  r.boundary_tokens = 17;
  EXPECT_STATUS(ImportState(c, chunks, r), kInvalidArgument);  // KV does not reach it
  KvChunk other = KvChunk::Zeros(KvLayout{1, 2, 16, DType::kBF16}, 16);
  EXPECT_STATUS(ImportState(c, std::vector<KvChunk>{other}, good), kInvalidArgument);
  EXPECT_STATUS(ExportKvChunk(c, s, 5, 5), kInvalidArgument);
  EXPECT_STATUS(ExportKvChunk(c, s, 0, 17), kInvalidArgument);
}

TEST_F(HybridRestoreTest, EvalRejectsBadInputWithoutTouchingTheState) {
  HybridState s = HybridState::Empty(model_->config());
  std::vector<float> logits(model_->config().vocab_size);
  EXPECT_STATUS(model_->Eval(128, &s, logits), kInvalidArgument);
  std::vector<float> wrong(5);
  EXPECT_STATUS(model_->Eval(1, &s, wrong), kInvalidArgument);
  EXPECT_EQ(s.tokens, 0u);
  HybridState bad = s;
  bad.layers.pop_back();
  EXPECT_STATUS(model_->Eval(1, &bad, logits), kInvalidArgument);
  EXPECT_STATUS(EncodeStoredBoundary(*model_, s, 0), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::hybrid
