// Tokenizer: text <-> token ids for a model.
//
// Implementations: BpeTokenizer (byte-level BPE, GPT-2 style, from GGUF metadata:
// model/tokenizers/bpe_tokenizer.h) and SentencePieceTokenizer (score-ranked merges with byte
// fallback: llama2.c tokenizer.bin, model/tokenizers/sentencepiece_tokenizer.h).
//
// Encode never adds BOS/EOS by itself unless the tokenizer's own settings say so
// (`add_bos`, as Hugging Face's tokenizer with add_special_tokens=True). Decode is
// the inverse on the bytes: Decode(Encode(s)) == s for valid UTF-8 s (SentencePiece
// drops the dummy-prefix space, as Hugging Face does). Ids outside the vocabulary
// are InvalidArgument.
//
// Thread-safety: immutable after construction; const methods may run concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::model {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (UTF-8; invalid bytes are encoded as their byte tokens).
  virtual Result<std::vector<uint32_t>> Encode(std::string_view text) const = 0;
  // The text of `ids` concatenated. InvalidArgument for an id >= vocab_size().
  virtual Result<std::string> Decode(std::span<const uint32_t> ids) const = 0;
  virtual uint32_t vocab_size() const = 0;
  virtual std::optional<uint32_t> bos_id() const = 0;
  virtual std::optional<uint32_t> eos_id() const = 0;
};

}  // namespace kvstash::model
