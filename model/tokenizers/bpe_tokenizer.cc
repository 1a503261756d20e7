#include "model/tokenizers/bpe_tokenizer.h"

#include <algorithm>
#include <climits>

#include "model/tokenizers/unicode_text.h"

namespace kvstash::model {
namespace {

// GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in byte order.
void ByteAlphabet(uint32_t cp_of_byte[256]) {
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp_of_byte[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
  }
}

bool StartsWithContraction(const std::vector<CodeUnit>& u, size_t i, size_t* len) {
  if (u[i].cp != '\'' || i + 1 >= u.size()) return false;
  const uint32_t a = u[i + 1].cp;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') {
    *len = 2;
    return true;
  }
  if (i + 2 < u.size()) {
    const uint32_t b = u[i + 2].cp;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
      *len = 3;
      return true;
    }
  }
  return false;
}

enum class Cls { kL, kN, kS, kO };
Cls Classify(const CodeUnit& u) {
  if (IsLetter(u)) return Cls::kL;
  if (IsNumber(u)) return Cls::kN;
  if (IsWhiteSpace(u)) return Cls::kS;
  return Cls::kO;
}

}  // namespace

std::vector<std::string_view> SplitGpt2(std::string_view text) {
  const std::vector<CodeUnit> u = DecodeUtf8(text);
  std::vector<Cls> cls(u.size());
  for (size_t i = 0; i < u.size(); ++i) cls[i] = Classify(u[i]);
  std::vector<std::string_view> out;
  const size_t n = u.size();
  auto emit = [&](size_t a, size_t b) {  // code units [a, b)
    const size_t begin = u[a].offset;
    const size_t end = b < n ? u[b].offset : text.size();
    out.push_back(text.substr(begin, end - begin));
  };
  auto run = [&](size_t j, Cls c) {
    while (j < n && cls[j] == c) ++j;
    return j;
  };
  size_t i = 0;
  while (i < n) {
    size_t len = 0;
    if (StartsWithContraction(u, i, &len)) {
      emit(i, i + len);
      i += len;
      continue;
    }
    // " ?X+" for X in {L, N, other}: an optional single space, then a run.
    size_t j = i;
    if (u[j].cp == ' ' && j + 1 < n && cls[j + 1] != Cls::kS) ++j;
    if (cls[j] != Cls::kS) {
      const size_t end = run(j, cls[j]);
      emit(i, end);
      i = end;
      continue;
    }
    // Whitespace run [i, k): \s+(?!\S) leaves the last one for the next piece when a
    // non-space follows; a lone whitespace before a non-space is \s+.
    const size_t k = run(i, Cls::kS);
    if (k == n || k - i == 1) {
      emit(i, k);
      i = k;
    } else {
      emit(i, k - 1);
      i = k - 1;
    }
  }
  return out;
}

std::vector<std::string_view> SplitQwen2(std::string_view text) {
  // A transcription of llama.cpp's unicode_regex_split_custom_qwen2 (src/unicode.cpp,
  // llama-cpp-python 0.3.36), position by position; comments give the regex branch.
  // llama.cpp's unicode_cpt_flags: every code point has a non-zero value (unassigned
  // ones carry UNDEFINED), only a position past the end reads as 0 (`in_text` false).
  struct Flags {
    bool letter = false, number = false, space = false, in_text = false;
  };
  constexpr uint32_t kOut = 0xFFFFFFFF;  // past the end
  const std::vector<CodeUnit> u = DecodeUtf8(text);
  const size_t n = u.size();
  std::vector<Flags> fl(n);
  for (size_t i = 0; i < n; ++i) fl[i] = {IsLetter(u[i]), IsNumber(u[i]), IsWhiteSpace(u[i]), true};
  auto flags = [&](size_t p) { return p < n ? fl[p] : Flags{}; };
  // An invalid byte is U+FFFD for llama.cpp; it only matters that it is none of the
  // ASCII characters the rules test.
  auto cpt = [&](size_t p) -> uint32_t { return p < n ? (u[p].valid ? u[p].cp : 0xFFFDu) : kOut; };
  auto lower = [](uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  std::vector<std::string_view> out;
  size_t prev = 0;
  auto emit = [&](size_t end) {  // code units [prev, end)
    if (end > prev) {
      const size_t begin = u[prev].offset;
      const size_t stop = end < n ? u[end].offset : text.size();
      out.push_back(text.substr(begin, stop - begin));
    }
    prev = end;
  };
  for (size_t pos = 0; pos < n;) {
    const uint32_t c = cpt(pos);
    const Flags f = flags(pos);
    // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
    if (c == '\'' && pos + 1 < n) {
      const uint32_t a = lower(cpt(pos + 1));
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        pos += 2;
        emit(pos);
        continue;
      }
      if (pos + 2 < n) {
        const uint32_t b = lower(cpt(pos + 2));
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          pos += 3;
          emit(pos);
          continue;
        }
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == '\r' || c == '\n' || f.number) && (f.letter || flags(pos + 1).letter)) {
      ++pos;
      while (flags(pos).letter) ++pos;
      emit(pos);
      continue;
    }
    // \p{N}: one digit per piece
    if (f.number) {
      emit(++pos);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    Flags f2 = c == ' ' ? flags(pos + 1) : f;
    if (!(f2.space || f2.letter || f2.number) && f.in_text) {
      pos += c == ' ' ? 1 : 0;
      while (!(f2.space || f2.letter || f2.number) && f2.in_text) f2 = flags(++pos);
      while (cpt(pos) == '\r' || cpt(pos) == '\n') ++pos;
      emit(pos);
      continue;
    }
    size_t spaces = 0, last_newline_end = 0;
    while (flags(pos + spaces).space) {
      const uint32_t c2 = cpt(pos + spaces);
      if (c2 == '\r' || c2 == '\n') last_newline_end = pos + spaces + 1;
      ++spaces;
    }
    if (last_newline_end > 0) {  // \s*[\r\n]+
      pos = last_newline_end;
      emit(pos);
      continue;
    }
    if (spaces > 1 && cpt(pos + spaces) != kOut) {  // \s+(?!\S)
      pos += spaces - 1;
      emit(pos);
      continue;
    }
    if (spaces > 0) {  // \s+
      pos += spaces;
      emit(pos);
      continue;
    }
    emit(++pos);  // no branch matches (unreachable: the branch above takes any other code point)
  }
  return out;
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(BpeVocab v) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  if (v.pre == "gpt-2" || v.pre == "default" || v.pre == "gpt2") {
    t->pre_ = Pre::kGpt2;
  } else if (v.pre == "smollm" || v.pre == "starcoder" || v.pre == "refact") {
    t->pre_ = Pre::kDigitsThenGpt2;
  } else if (v.pre == "qwen2") {
    t->pre_ = Pre::kQwen2;
  } else {
    return Status::NotSupported("BPE pre-tokenizer '" + v.pre + "' is not supported");
  }
  if (v.tokens.empty()) return Status::InvalidArgument("BPE vocabulary is empty");
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size()) {
    return Status::InvalidArgument("BPE token_type count differs from the token count");
  }
  uint32_t cp_of_byte[256];
  ByteAlphabet(cp_of_byte);
  std::unordered_map<uint32_t, uint8_t> byte_of_cp;
  for (int b = 0; b < 256; ++b) {
    AppendUtf8(cp_of_byte[b], &t->byte_char_[b]);
    byte_of_cp[cp_of_byte[b]] = static_cast<uint8_t>(b);
  }
  t->bytes_.resize(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& s = v.tokens[id];
    const int type = v.token_types.empty() ? 1 : v.token_types[id];
    const bool special = type == 3 || type == 4;
    std::string raw;
    bool mapped = true;
    for (const CodeUnit& cu : DecodeUtf8(s)) {
      auto it = byte_of_cp.find(cu.cp);
      if (!cu.valid || it == byte_of_cp.end()) {
        mapped = false;
        break;
      }
      raw.push_back(static_cast<char>(it->second));
    }
    t->bytes_[id] = (special || !mapped) ? s : raw;
    if (special && !s.empty()) {
      t->specials_.push_back(s);
      t->special_ids_.push_back(static_cast<uint32_t>(id));
    } else {
      t->token_id_.emplace(s, static_cast<uint32_t>(id));
    }
  }
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos) {
      return Status::InvalidArgument("BPE merge " + std::to_string(r) + " is not 'left right'");
    }
    t->merge_rank_.emplace(m, static_cast<uint32_t>(r));  // first occurrence wins
  }
  for (auto id : {v.bos, v.eos}) {
    if (id && *id >= v.tokens.size()) return Status::InvalidArgument("BPE bos/eos id outside the vocabulary");
  }
  t->bos_ = v.bos;
  t->eos_ = v.eos;
  t->add_bos_ = v.add_bos && v.bos.has_value();
  return t;
}

Status BpeTokenizer::EncodePiece(std::string_view piece, std::vector<uint32_t>* out) const {
  std::vector<std::string> sym;
  sym.reserve(piece.size());
  for (unsigned char b : piece) sym.push_back(byte_char_[b]);
  std::string key;
  while (sym.size() > 1) {
    uint32_t best = UINT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      key.assign(sym[i]).append(" ").append(sym[i + 1]);
      auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == UINT32_MAX) break;
    // Merge every occurrence of the best pair, left to right (as HF and GPT-2 do).
    const std::string left = sym[at], right = sym[at + 1];
    std::vector<std::string> next;
    next.reserve(sym.size());
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size() && sym[i] == left && sym[i + 1] == right) {
        next.push_back(left + right);
        ++i;
      } else {
        next.push_back(std::move(sym[i]));
      }
    }
    sym = std::move(next);
  }
  for (const std::string& s : sym) {
    auto it = token_id_.find(s);
    if (it == token_id_.end()) return Status::Internal("BPE symbol missing from the vocabulary");
    out->push_back(it->second);
  }
  return Status::Ok();
}

Status BpeTokenizer::EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out) const {
  if (pre_ == Pre::kGpt2 || pre_ == Pre::kQwen2) {
    for (std::string_view piece : pre_ == Pre::kGpt2 ? SplitGpt2(text) : SplitQwen2(text)) {
      KVSTASH_RETURN_IF_ERROR(EncodePiece(piece, out));
    }
    return Status::Ok();
  }
  // Digits first: each \p{N} code point is its own pre-token; GPT-2 pattern between.
  size_t start = 0;
  for (const CodeUnit& cu : DecodeUtf8(text)) {
    if (!IsNumber(cu)) continue;
    for (std::string_view piece : SplitGpt2(text.substr(start, cu.offset - start))) {
      KVSTASH_RETURN_IF_ERROR(EncodePiece(piece, out));
    }
    KVSTASH_RETURN_IF_ERROR(EncodePiece(text.substr(cu.offset, cu.len), out));
    start = cu.offset + cu.len;
  }
  for (std::string_view piece : SplitGpt2(text.substr(start))) KVSTASH_RETURN_IF_ERROR(EncodePiece(piece, out));
  return Status::Ok();
}

Result<std::vector<uint32_t>> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<uint32_t> out;
  if (add_bos_) out.push_back(*bos_);
  size_t start = 0, i = 0;
  while (i < text.size()) {
    size_t best_len = 0, best = 0;
    for (size_t k = 0; k < specials_.size(); ++k) {
      const std::string& s = specials_[k];
      if (s.size() > best_len && text.compare(i, s.size(), s) == 0) {
        best_len = s.size();
        best = k;
      }
    }
    if (best_len == 0) {
      ++i;
      continue;
    }
    KVSTASH_RETURN_IF_ERROR(EncodeOrdinary(text.substr(start, i - start), &out));
    out.push_back(special_ids_[best]);
    i += best_len;
    start = i;
  }
  KVSTASH_RETURN_IF_ERROR(EncodeOrdinary(text.substr(start), &out));
  return out;
}

Result<std::string> BpeTokenizer::Decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id >= bytes_.size()) {
      return Status::InvalidArgument("token id " + std::to_string(id) + " outside the vocabulary");
    }
    out += bytes_[id];
  }
  return out;
}

}  // namespace kvstash::model
