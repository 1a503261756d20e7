// SentencePieceTokenizer: SentencePiece-style BPE over pieces with scores and byte
// fallback, as llama2.c's run.c encodes (and as SentencePiece's BPE model does for a
// model trained without text normalisation).
//
// Encode(text):
//   1. If text is non-empty, a dummy-prefix space is prepended (SentencePiece
//      add_dummy_prefix); spaces are part of pieces (the file's U+2581 "▁" is read
//      as ' ').
//   2. Each UTF-8 code point becomes the piece of that text if one exists, else one
//      byte token per byte (<0x00>..<0xFF>, ids found by their piece text).
//   3. Repeatedly merge the adjacent pair whose concatenation is a normal piece with
//      the highest score (leftmost on ties), until none exists.
//   BOS is prepended when add_bos (llama2.c does; Hugging Face LlamaTokenizer too).
// Decode: pieces concatenated, byte tokens as their byte, control tokens (BOS/EOS/
//   UNK) as nothing; the leading space of the first piece (the dummy prefix) dropped.
//
// llama2.c tokenizer.bin layout (karpathy/llama2.c tokenizer.py): u32
// max_token_length, then per id: f32 score, i32 len, len bytes (' ' for "▁"; BOS and
// EOS pieces are "\n<s>\n" and "\n</s>\n"; ids 0, 1, 2 = UNK, BOS, EOS). The file
// does not store its vocabulary size: the model's vocab_size is passed in.
//
// Thread-safety: immutable after creation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizers/tokenizer.h"

namespace kvstash::model {

struct SentencePieceVocab {
  std::vector<std::string> pieces;   // "▁" may be used for space
  std::vector<float> scores;
  std::vector<int32_t> types;        // 1 normal, 2 unknown, 3 control, 6 byte; empty: inferred
  std::optional<uint32_t> bos, eos;
  bool add_bos = true;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<SentencePieceTokenizer>> Create(SentencePieceVocab vocab);
  // Reads a llama2.c tokenizer.bin with `vocab_size` entries (BOS 1, EOS 2).
  // Corruption for a truncated or inconsistent file.
  static Result<std::unique_ptr<SentencePieceTokenizer>> FromLlama2cFile(const std::string& path,
                                                                         uint32_t vocab_size);

  Result<std::vector<uint32_t>> Encode(std::string_view text) const override;
  Result<std::string> Decode(std::span<const uint32_t> ids) const override;
  uint32_t vocab_size() const override { return static_cast<uint32_t>(pieces_.size()); }
  std::optional<uint32_t> bos_id() const override { return bos_; }
  std::optional<uint32_t> eos_id() const override { return eos_; }

 private:
  SentencePieceTokenizer() = default;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<bool> control_;
  std::vector<int> byte_value_;                    // -1 unless a byte token
  std::unordered_map<std::string, uint32_t> normal_;  // piece text -> id
  int32_t byte_id_[256];
  std::optional<uint32_t> bos_, eos_;
  bool add_bos_ = true;
};

}  // namespace kvstash::model
