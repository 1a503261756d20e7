// The state parser/writer against the real libllama and the real SmolLM2 GGUF: a state
// exported after a prefill parses, rebuilds bit-exactly (whole and from chunks), and
// imports into a fresh context that then gives next-token logits identical to the
// context that prefilled; every truncation and every byte flip of a real 8-token state
// is refused or (inside K/V data) parses to different data; states of the other
// flash-attention setting, the other KV dtype, another layout or several streams are
// refused, by this parser and by llama.cpp alike.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/kv_chunk_slice.h"
#include "engines/llama_cpp/llama_engine.h"
#include "engines/llama_cpp/llama_state.h"
#include "tests/llama_cpp/state_regions.h"
#include "tests/support/test_util.h"

namespace kvstash::llama_cpp {
namespace {

// Real text (the start of the GPL-3 preamble, as Debian's base-files ships it).
constexpr const char* kText =
    "The GNU General Public License is a free, copyleft license for software and other "
    "kinds of works. The licenses for most software and other practical works are designed "
    "to take away your freedom to share and change the works. By contrast, the GNU General "
    "Public License is intended to guarantee your freedom to share and change all versions "
    "of a program--to make sure it remains free software for all its users.";

class LlamaStateRealTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InitLlamaBackend();
    auto m = LoadModel(testing::SourceDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    auto t = Tokenize(model_, kText);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokens_ = new std::vector<llama_token>(std::move(t).value());
  }
  static void TearDownTestSuite() {
    llama_model_free(model_);
    delete tokens_;
  }

  struct Ctx {
    llama_context_params params;
    StateLayout layout;
    ContextPtr ctx;
  };
  static Ctx MakeContext(bool flash_attn, DType dtype, uint32_t n_ctx = 128) {
    Ctx c;
    c.params = ContextParams(n_ctx, 1, flash_attn, dtype).value();
    c.layout = StateLayoutOf(model_, c.params).value();
    c.ctx = NewContext(model_, c.params).value();
    return c;
  }
  // The state after prefilling the first n tokens of the text in a fresh context.
  static std::vector<uint8_t> PrefillState(Ctx& c, size_t n) {
    EXPECT_OK(Evaluate(c.ctx.get(), std::span(*tokens_).first(n), 0));
    return ExportSeqState(c.ctx.get()).value();
  }

  static inline llama_model* model_ = nullptr;
  static inline std::vector<llama_token>* tokens_ = nullptr;
};

TEST_F(LlamaStateRealTest, LayoutOfSmolLM2) {
  const Ctx c = MakeContext(false, DType::kF16);
  EXPECT_EQ(c.layout.kv, (KvLayout{30, 3, 64, DType::kF16}));
  EXPECT_TRUE(c.layout.v_trans);
  EXPECT_TRUE(c.layout.k_rope_interleaved);  // LLAMA_ROPE_TYPE_NORM
  EXPECT_EQ(c.layout.RowBytes(), 384u);
  auto p = ContextParams(64, 1, false, DType::kF16).value();
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
  EXPECT_STATUS(StateLayoutOf(model_, p), kNotSupported);
  p = ContextParams(64, 1, false, DType::kF16).value();
  p.type_v = GGML_TYPE_BF16;
  EXPECT_STATUS(StateLayoutOf(model_, p), kNotSupported);
  p.type_k = p.type_v = GGML_TYPE_F32;
  EXPECT_STATUS(StateLayoutOf(model_, p), kNotSupported);
}

TEST_F(LlamaStateRealTest, ExportParseRebuildImportGivesIdenticalLogits) {
  ASSERT_GE(tokens_->size(), 40u);
  const size_t n = 40;
  const std::span<const llama_token> prefix = std::span(*tokens_).first(n - 1);
  const std::span<const llama_token> last = std::span(*tokens_).subspan(n - 1, 1);
  for (bool fa : {false, true}) {
    for (DType dt : {DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(std::string("flash_attn ") + (fa ? "on " : "off ") + std::string(DTypeName(dt)));
      Ctx a = MakeContext(fa, dt);
      ASSERT_OK(Evaluate(a.ctx.get(), prefix, 0));
      ASSERT_OK_AND_ASSIGN(auto state, ExportSeqState(a.ctx.get()));
      EXPECT_EQ(state.size(), a.layout.StateBytes(n - 1));
      EXPECT_EQ(state.size() - 16 - 12 * (n - 1) - 8 - 30 * 24, (n - 1) * 23040u);
      ASSERT_OK_AND_ASSIGN(SeqState parsed, ParseSeqState(state, a.layout));
      EXPECT_EQ(parsed.seq_id, 0);
      EXPECT_EQ(parsed.kv.tokens, n - 1);
      // Rebuilt whole and from 16-token chunks: the same bytes.
      ASSERT_OK_AND_ASSIGN(auto rebuilt, WriteSeqState(a.layout, 0, std::span(&parsed.kv, 1)));
      EXPECT_EQ(rebuilt, state);
      std::vector<KvChunk> chunks;
      for (uint32_t t = 0; t < n - 1; t += 16) {
        ASSERT_OK_AND_ASSIGN(KvChunk ch, SliceTokens(parsed.kv, t, std::min<uint32_t>(16, n - 1 - t)));
        chunks.push_back(std::move(ch));
      }
      ASSERT_OK_AND_ASSIGN(auto from_chunks, WriteSeqState(a.layout, 0, chunks));
      EXPECT_EQ(from_chunks, state);

      // Continue in the prefilling context, and in a fresh one that imports the rebuilt state.
      ASSERT_OK_AND_ASSIGN(auto logits_a, Evaluate(a.ctx.get(), last, n - 1));
      Ctx b = MakeContext(fa, dt);
      ASSERT_OK(ImportSeqState(b.ctx.get(), from_chunks, n - 1));
      ASSERT_OK_AND_ASSIGN(auto logits_b, Evaluate(b.ctx.get(), last, n - 1));
      ASSERT_EQ(logits_a.size(), 49152u);
      EXPECT_EQ(0, std::memcmp(logits_a.data(), logits_b.data(), logits_a.size() * 4));
      // The same split (n-1 tokens, then 1) in another fresh context.
      Ctx c = MakeContext(fa, dt);
      ASSERT_OK(Evaluate(c.ctx.get(), prefix, 0));
      ASSERT_OK_AND_ASSIGN(auto logits_c, Evaluate(c.ctx.get(), last, n - 1));
      EXPECT_EQ(0, std::memcmp(logits_a.data(), logits_c.data(), logits_a.size() * 4));
    }
  }
}

// Every truncation of a real 8-token state is Corruption. Every byte of a real 4-token
// state (92,952 bytes; 4 rather than 8 tokens keeps the test at a few seconds, as each
// of the n flips is a full parse of n bytes) flipped: a structure byte is refused; a
// K/V data byte parses (the parser checks structure) and gives a chunk whose content
// checksum differs from the original's (what the stored payload's checksum catches).
// Both V layouts.
TEST_F(LlamaStateRealTest, EveryTruncationAndByteFlipOfARealState) {
  for (bool fa : {false, true}) {
    SCOPED_TRACE(fa ? "flash_attn on" : "flash_attn off");
    Ctx a = MakeContext(fa, DType::kF16, 32);
    const std::vector<uint8_t> state8 = PrefillState(a, 8);
    for (size_t len = 0; len < state8.size(); ++len) {
      auto r = ParseSeqState(std::span(state8).first(len), a.layout);
      ASSERT_TRUE(testing::HasCode(r, Status::Code::kCorruption)) << "length " << len;
    }
    std::vector<uint8_t> longer = state8;
    longer.push_back(0);
    EXPECT_STATUS(ParseSeqState(longer, a.layout), kCorruption);

    Ctx b = MakeContext(fa, DType::kF16, 32);
    const std::vector<uint8_t> state = PrefillState(b, 4);
    ASSERT_EQ(state.size(), 92952u);
    ASSERT_OK_AND_ASSIGN(SeqState orig, ParseSeqState(state, a.layout));
    const uint64_t sum = orig.kv.ContentChecksum();
    const std::vector<bool> is_data = state_regions::DataByteMask(a.layout, 4);
    ASSERT_EQ(is_data.size(), state.size());
    std::vector<uint8_t> flipped = state;
    size_t structure = 0;
    for (size_t i = 0; i < state.size(); ++i) {
      flipped[i] ^= 0xff;
      auto r = ParseSeqState(flipped, a.layout);
      if (is_data[i]) {
        ASSERT_TRUE(r.ok()) << "data byte " << i << ": " << r.status().ToString();
        ASSERT_NE(r->kv.ContentChecksum(), sum) << "data byte " << i;
      } else {
        ++structure;
        ASSERT_FALSE(r.ok()) << "structure byte " << i;
      }
      flipped[i] = state[i];
    }
    EXPECT_EQ(structure, 16 + 12 * 4 + 8 + 60 * 12u);
  }
}

TEST_F(LlamaStateRealTest, OtherFlashAttentionSettingOrDtypeIsRefused) {
  Ctx off = MakeContext(false, DType::kF16, 32);
  Ctx on = MakeContext(true, DType::kF16, 32);
  Ctx bf = MakeContext(false, DType::kBF16, 32);
  const auto s_off = PrefillState(off, 6);
  const auto s_on = PrefillState(on, 6);
  const auto s_bf = PrefillState(bf, 6);
  // This parser refuses...
  auto r = ParseSeqState(s_on, off.layout);
  EXPECT_STATUS(r, kMismatch);
  EXPECT_NE(r.status().message().find("V transposition"), std::string::npos) << r.status().ToString();
  EXPECT_STATUS(ParseSeqState(s_off, on.layout), kMismatch);
  EXPECT_STATUS(ParseSeqState(s_bf, off.layout), kMismatch);
  EXPECT_STATUS(ParseSeqState(s_off, bf.layout), kMismatch);
  // ...and so does llama.cpp (the import leaves the sequence empty).
  Ctx fresh = MakeContext(false, DType::kF16, 32);
  EXPECT_FALSE(ImportSeqState(fresh.ctx.get(), s_on, 6).ok());
  EXPECT_FALSE(ImportSeqState(fresh.ctx.get(), s_bf, 6).ok());
  EXPECT_EQ(llama_memory_seq_pos_max(llama_get_memory(fresh.ctx.get()), 0), -1);
  EXPECT_OK(ImportSeqState(fresh.ctx.get(), s_off, 6));
}

TEST_F(LlamaStateRealTest, StateOfAnotherModelLayoutIsRefused) {
  Ctx a = MakeContext(false, DType::kF16, 32);
  const auto state = PrefillState(a, 5);
  ASSERT_OK_AND_ASSIGN(SeqState parsed, ParseSeqState(state, a.layout));
  // The same KV written as a model with one layer fewer, and as one with 1 KV head of
  // dim 192 (same bytes per token, another head shape).
  StateLayout fewer = a.layout;
  fewer.kv.n_layers = 29;
  KvChunk cut = KvChunk::Zeros(fewer.kv, 5);
  std::memcpy(cut.data.data(), parsed.kv.data.data(), cut.data.size());
  ASSERT_OK_AND_ASSIGN(auto s_fewer, WriteSeqState(fewer, 0, std::span(&cut, 1)));
  // (K taken as llama.cpp stores it, without the Llama-family channel permutation.)
  StateLayout wide = a.layout;
  wide.k_rope_interleaved = false;
  StateLayout plain = a.layout;
  plain.k_rope_interleaved = false;
  ASSERT_OK_AND_ASSIGN(SeqState as_stored, ParseSeqState(state, plain));
  wide.kv.n_kv_heads = 1;
  wide.kv.head_dim = 192;
  KvChunk w = as_stored.kv;
  w.layout = wide.kv;
  ASSERT_OK_AND_ASSIGN(auto s_wide, WriteSeqState(wide, 0, std::span(&w, 1)));
  EXPECT_STATUS(ParseSeqState(s_fewer, a.layout), kMismatch);
  // One head of 192 has SmolLM2's row size: only the shape of the canonical layout
  // differs, so the state is byte-identical and parses; the namespace (layout and
  // model fingerprint in the chain keys) is what separates such models.
  EXPECT_EQ(s_wide, state);
  Ctx fresh = MakeContext(false, DType::kF16, 32);
  EXPECT_FALSE(ImportSeqState(fresh.ctx.get(), s_fewer, 5).ok());
  // A state of a two-stream (non-unified, two-sequence) context.
  auto p = ContextParams(64, 1, false, DType::kF16).value();
  p.n_seq_max = 2;
  p.kv_unified = false;
  ASSERT_OK_AND_ASSIGN(ContextPtr two, NewContext(model_, p));
  ASSERT_OK(Evaluate(two.get(), std::span(*tokens_).first(4), 0));
  ASSERT_OK_AND_ASSIGN(auto s_two, ExportSeqState(two.get()));
  EXPECT_STATUS(ParseSeqState(s_two, a.layout), kNotSupported);
}

}  // namespace
}  // namespace kvstash::llama_cpp
