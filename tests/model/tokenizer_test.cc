// Tokenizers on hand-built vocabularies (hand-derived ids), and the llama2.c
// tokenizer.bin against SentencePiece's own encoding of real text (goldens from
// tools/gen_runtime_goldens.py). The SmolLM2 vectors are in smollm2_test.cc.
#include "model/tokenizers/bpe_tokenizer.h"
#include "model/tokenizers/sentencepiece_tokenizer.h"
#include "tests/model/test_data.h"

namespace kvstash::model {
namespace {

// The pieces a pre-tokenizer's split makes of s, as strings.
std::vector<std::string> Pieces(std::vector<std::string_view> (*split)(std::string_view),
                                std::string_view s) {
  std::vector<std::string> out;
  for (std::string_view p : split(s)) out.emplace_back(p);
  return out;
}
std::vector<std::string> Split(std::string_view s) { return Pieces(SplitGpt2, s); }
std::vector<std::string> SplitQ(std::string_view s) { return Pieces(SplitQwen2, s); }

TEST(SplitGpt2, Pattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Split(""), V{});
  EXPECT_EQ(Split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Split("it's we'll"), (V{"it", "'s", " we", "'ll"}));
  EXPECT_EQ(Split("a  b"), (V{"a", " ", " b"}));           // \s+(?!\S) leaves one space
  EXPECT_EQ(Split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Split("x 2007, ok!!"), (V{"x", " 2007", ",", " ok", "!!"}));
  EXPECT_EQ(Split("end  "), (V{"end", "  "}));
  EXPECT_EQ(Split("caf\xC3\xA9 \xE6\x97\xA5"), (V{"caf\xC3\xA9", " \xE6\x97\xA5"}));
  EXPECT_EQ(Split("\xFF" "a"), (V{"\xFF", "a"}));  // invalid byte: its own "other" run
}

// The qwen2 pattern as llama.cpp's unicode_regex_split_custom_qwen2 runs it (hand-derived
// from the regex; the real vocabulary's vectors are in qwen2_test.cc).
TEST(SplitQwen2, Pattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(SplitQ(""), V{});
  EXPECT_EQ(SplitQ("Hello, world!"), (V{"Hello", ",", " world", "!"}));
  EXPECT_EQ(SplitQ("abc123"), (V{"abc", "1", "2", "3"}));  // \p{N}: one digit each
  EXPECT_EQ(SplitQ(" 42"), (V{" ", "4", "2"}));
  EXPECT_EQ(SplitQ("I'M we'Ll"), (V{"I", "'M", " we", "'Ll"}));        // contractions, any case
  EXPECT_EQ(SplitQ("$x (y)"), (V{"$x", " (", "y", ")"}));              // [^\r\n\p{L}\p{N}]?\p{L}+
  EXPECT_EQ(SplitQ("a   b"), (V{"a", "  ", " b"}));                    // \s+(?!\S)
  EXPECT_EQ(SplitQ("x  \n\n y"), (V{"x", "  \n\n", " y"}));            // \s*[\r\n]+
  EXPECT_EQ(SplitQ("foo()\r\n\tbar"), (V{"foo", "()\r\n", "\tbar"}));  // punctuation takes [\r\n]*
  EXPECT_EQ(SplitQ("\nabc"), (V{"\n", "abc"}));                        // \r, \n never lead a letter run
  EXPECT_EQ(SplitQ("end \t "), (V{"end", " \t "}));                    // trailing \s+
  EXPECT_EQ(SplitQ("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC"), (V{"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC"}));
  EXPECT_EQ(SplitQ("\xD9\xA1\xD9\xA2"), (V{"\xD9\xA1", "\xD9\xA2"}));  // Arabic-Indic digits are \p{N}
  // An unassigned code point (U+0378) is "other" for llama.cpp too (its UNDEFINED flag
  // is non-zero), so it starts a punctuation run that takes the apostrophe.
  EXPECT_EQ(SplitQ("1\xCD\xB8're"), (V{"1", "\xCD\xB8'", "re"}));
  std::string joined;
  const std::string mixed = "def f(x):\n\treturn x**2  # \xF0\x9F\x91\x8B\n\n\n";
  for (const std::string& p : SplitQ(mixed)) joined += p;
  EXPECT_EQ(joined, mixed);
}

// Byte-level alphabet: ' ' is "Ġ" (U+0120).
BpeVocab TinyBpe() {
  BpeVocab v;
  v.tokens = {"a", "b", "c", "\xC4\xA0", "ab", "\xC4\xA0" "a", "\xC4\xA0" "ab", "<|s|>"};
  v.token_types = {1, 1, 1, 1, 1, 1, 1, 3};
  v.merges = {"a b", "\xC4\xA0 a", "\xC4\xA0" "a b"};
  for (int b = 0; b < 256; ++b) {
    // Every other byte as its own token so any text encodes.
    if (b == 'a' || b == 'b' || b == 'c' || b == ' ') continue;
    std::string s;
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) {
      if (b < 0x80) s.push_back(static_cast<char>(b));
      else { s.push_back(static_cast<char>(0xC0 | (b >> 6))); s.push_back(static_cast<char>(0x80 | (b & 0x3F))); }
      v.tokens.push_back(s);
      v.token_types.push_back(1);
    }
  }
  return v;
}

TEST(BpeTokenizer, MergesByRankAndSpecials) {
  ASSERT_OK_AND_ASSIGN(auto t, BpeTokenizer::Create(TinyBpe()));
  ASSERT_OK_AND_ASSIGN(auto ids, t->Encode("ab abc<|s|>ba"));
  // "ab" -> ab(4). " abc": "a b" (rank 0) merges before "Ġ a" (rank 1), leaving no
  // applicable merge: Ġ(3) ab(4) c(2). Special 7. "ba" -> b(1) a(0).
  EXPECT_EQ(ids, (std::vector<uint32_t>{4, 3, 4, 2, 7, 1, 0}));
  ASSERT_OK_AND_ASSIGN(auto text, t->Decode(ids));
  EXPECT_EQ(text, "ab abc<|s|>ba");
  EXPECT_STATUS(t->Decode(std::vector<uint32_t>{100000}), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto none, t->Encode(""));
  EXPECT_TRUE(none.empty());
}

TEST(BpeTokenizer, RejectsBadMetadata) {
  BpeVocab v = TinyBpe();
  v.pre = "llama3";
  EXPECT_STATUS(BpeTokenizer::Create(v), kNotSupported);
  v = TinyBpe();
  v.merges.push_back("nospace");
  EXPECT_STATUS(BpeTokenizer::Create(v), kInvalidArgument);
  v = TinyBpe();
  v.token_types.pop_back();
  EXPECT_STATUS(BpeTokenizer::Create(v), kInvalidArgument);
}

TEST(SentencePieceTokenizer, ScoreMergesAndByteFallback) {
  SentencePieceVocab v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.pieces.push_back(buf);
  }
  // ids 259.. : normal pieces
  for (const char* p : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab"}) v.pieces.push_back(p);
  v.scores.assign(v.pieces.size(), 0.0f);
  v.scores[262] = -1;  // ▁a
  v.scores[263] = -2;  // ab
  v.scores[264] = -3;  // ▁ab
  v.bos = 1;
  v.eos = 2;
  ASSERT_OK_AND_ASSIGN(auto t, SentencePieceTokenizer::Create(v));
  ASSERT_OK_AND_ASSIGN(auto ids, t->Encode("ab\n"));
  // BOS, "▁a"+"b" -> ▁ab (▁a merges first, then ▁a+b), "\n" -> byte 0x0A (id 13).
  EXPECT_EQ(ids, (std::vector<uint32_t>{1, 264, 13}));
  ASSERT_OK_AND_ASSIGN(auto text, t->Decode(ids));
  EXPECT_EQ(text, "ab\n");
  ASSERT_OK_AND_ASSIGN(auto empty, t->Encode(""));
  EXPECT_EQ(empty, (std::vector<uint32_t>{1}));
}

TEST(SentencePieceTokenizer, Llama2cTokenizerBinMatchesSentencePiece) {
  const auto g = testing::LoadJson("tiny_llama2c/goldens.json");
  ASSERT_OK_AND_ASSIGN(auto t, SentencePieceTokenizer::FromLlama2cFile(testing::DataPath("tiny_llama2c/tokenizer.bin"), 384));
  for (const auto& c : g["tokenizer_cases"]) {
    const std::string text = c["text"].get<std::string>();
    ASSERT_OK_AND_ASSIGN(auto ids, t->Encode(text));
    std::vector<uint32_t> want = {1};  // llama2.c prepends BOS; SentencePiece's ids follow
    for (uint32_t id : testing::Ids(c["ids"])) want.push_back(id);
    EXPECT_EQ(ids, want) << text.substr(0, 60);
    ASSERT_OK_AND_ASSIGN(auto back, t->Decode(ids));
    EXPECT_EQ(back, text);
  }
}

TEST(SentencePieceTokenizer, MalformedTokenizerBin) {
  EXPECT_STATUS(SentencePieceTokenizer::FromLlama2cFile(testing::DataPath("tiny_llama2c/tokenizer.bin"), 385),
                kCorruption);  // file holds 384 entries
  EXPECT_STATUS(SentencePieceTokenizer::FromLlama2cFile(testing::DataPath("tiny_llama2c/tokenizer.bin"), 300),
                kCorruption);  // trailing bytes
  EXPECT_STATUS(SentencePieceTokenizer::FromLlama2cFile(testing::DataPath("dequant_vectors.json"), 384), kCorruption);
}

}  // namespace
}  // namespace kvstash::model
