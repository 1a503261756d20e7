// BpeTokenizer: byte-level BPE as GPT-2 defined it and Hugging Face tokenizers
// implements it (ByteLevel pre-tokenizer + BPE model + ByteLevel decoder), built from
// the `tokenizer.ggml.*` metadata of a GGUF file (tokenizer.ggml.model == "gpt2").
//
// Encode(text):
//   1. Special tokens (GGUF token types 3 "control" and 4 "user defined", e.g.
//      <|im_start|>) are matched literally first, longest match wins.
//   2. The rest is split by the pre-tokenizer named by tokenizer.ggml.pre:
//      "gpt-2"/"default": the GPT-2 pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      "smollm"/"starcoder"/"refact": every \p{N} code point alone (HF Digits with
//        individual_digits), then the GPT-2 pattern (SmolLM2's tokenizer.json).
//      "qwen2" (Qwen2/2.5/3 tokenizer.json; llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2):
//        (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//        ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//        as llama.cpp's hand-written matcher (unicode_regex_split_custom_qwen2) runs it,
//        with ICU's character classes. Invalid UTF-8 bytes are kept as bytes here,
//        while llama.cpp replaces each by U+FFFD: only valid UTF-8 tokenises alike.
//   3. Each piece's bytes map to GPT-2's printable byte alphabet (bytes_to_unicode)
//      and are merged by BPE: repeatedly the adjacent pair with the lowest merge rank
//      (tokenizer.ggml.merges order) until none applies; symbols map to ids.
// Decode: the bytes of each token (byte alphabet reversed; special tokens as their
// text), concatenated.
//
// Errors: Create returns InvalidArgument/NotSupported for inconsistent metadata or an
// unknown pre-tokenizer; Encode fails (Internal) only if a merged symbol is missing
// from the vocabulary, which a consistent vocabulary never causes.
// Thread-safety: immutable after Create.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizers/tokenizer.h"

namespace kvstash::model {

struct BpeVocab {
  std::vector<std::string> tokens;  // in the byte alphabet, as GGUF stores them
  std::vector<int32_t> token_types; // GGUF: 1 normal, 2 unknown, 3 control, 4 user, 6 byte; may be empty
  std::vector<std::string> merges;  // "left right", rank = index
  std::string pre = "gpt-2";        // tokenizer.ggml.pre
  std::optional<uint32_t> bos, eos;
  bool add_bos = false;             // tokenizer.ggml.add_bos_token
};

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> Create(BpeVocab vocab);

  Result<std::vector<uint32_t>> Encode(std::string_view text) const override;
  Result<std::string> Decode(std::span<const uint32_t> ids) const override;
  uint32_t vocab_size() const override { return static_cast<uint32_t>(bytes_.size()); }
  std::optional<uint32_t> bos_id() const override { return bos_; }
  std::optional<uint32_t> eos_id() const override { return eos_; }

 private:
  enum class Pre { kGpt2, kDigitsThenGpt2, kQwen2 };
  BpeTokenizer() = default;
  Status EncodePiece(std::string_view bytes, std::vector<uint32_t>* out) const;
  Status EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out) const;

  Pre pre_ = Pre::kGpt2;
  std::unordered_map<std::string, uint32_t> token_id_;  // byte-alphabet string -> id
  std::unordered_map<std::string, uint32_t> merge_rank_;
  std::vector<std::string> bytes_;                      // id -> raw bytes
  std::vector<std::string> specials_;                   // literal special-token texts
  std::vector<uint32_t> special_ids_;
  std::string byte_char_[256];                          // byte -> UTF-8 of its alphabet char
  std::optional<uint32_t> bos_, eos_;
  bool add_bos_ = false;
};

// Splits `text` into pre-tokens by the GPT-2 pattern (see above); returns byte ranges.
std::vector<std::string_view> SplitGpt2(std::string_view text);
// Splits `text` into pre-tokens by the qwen2 pattern (see above); returns byte ranges
// that concatenate to `text`.
std::vector<std::string_view> SplitQwen2(std::string_view text);

}  // namespace kvstash::model
