// UTF-8 decoding into code points and the Unicode character classes that
// tokenizer pre-splitting rules use, with ICU (libicu) as the source of the
// Unicode Character Database.
//
// Classes follow the regex syntax of Hugging Face tokenizers' pre-tokenizers:
//   \p{L}  general category L* (Lu, Ll, Lt, Lm, Lo)
//   \p{N}  general category N* (Nd, Nl, No)
//   \s     the White_Space property
//
// Invalid UTF-8 never fails: each byte of an invalid or truncated sequence becomes
// its own unit with `valid == false`, classed as "other".
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::model {

struct CodeUnit {
  uint32_t cp = 0;      // code point (the raw byte when !valid)
  uint32_t offset = 0;  // byte offset in the text
  uint8_t len = 0;      // bytes
  bool valid = true;
};

std::vector<CodeUnit> DecodeUtf8(std::string_view text);

bool IsLetter(const CodeUnit& u);
bool IsNumber(const CodeUnit& u);
bool IsWhiteSpace(const CodeUnit& u);

// Appends the UTF-8 encoding of code point cp (REQUIRES: cp <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace kvstash::model
