#include "model/tokenizers/sentencepiece_tokenizer.h"

#include <cstdio>
#include <cstring>

#include "common/byte_io.h"
#include "common/mapped_file.h"
#include "kvstash/dtype_bits.h"
#include "model/tokenizers/unicode_text.h"

namespace kvstash::model {
namespace {

std::string SpaceFromMarker(const std::string& s) {
  static const std::string kMarker = "\xE2\x96\x81";  // U+2581
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, kMarker.size(), kMarker) == 0) {
      out.push_back(' ');
      i += kMarker.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

int ParseByteToken(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = s[k];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Create(SentencePieceVocab v) {
  const size_t n = v.pieces.size();
  if (n == 0) return Status::InvalidArgument("SentencePiece vocabulary is empty");
  if (v.scores.size() != n || (!v.types.empty() && v.types.size() != n)) {
    return Status::InvalidArgument("SentencePiece pieces, scores and types differ in length");
  }
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  std::fill(std::begin(t->byte_id_), std::end(t->byte_id_), -1);
  t->scores_ = std::move(v.scores);
  t->pieces_.resize(n);
  t->control_.assign(n, false);
  t->byte_value_.assign(n, -1);
  for (size_t id = 0; id < n; ++id) {
    t->pieces_[id] = SpaceFromMarker(v.pieces[id]);
    int type = v.types.empty() ? 1 : v.types[id];
    if (v.types.empty()) {
      if (id == 0 || (v.bos && id == *v.bos) || (v.eos && id == *v.eos)) type = 3;
      else if (ParseByteToken(t->pieces_[id]) >= 0) type = 6;
    }
    if (type == 6) {
      const int b = ParseByteToken(t->pieces_[id]);
      if (b < 0) return Status::InvalidArgument("byte token " + std::to_string(id) + " is not <0xHH>");
      t->byte_value_[id] = b;
      if (t->byte_id_[b] < 0) t->byte_id_[b] = static_cast<int32_t>(id);
    } else if (type == 2 || type == 3 || type == 5) {
      t->control_[id] = true;
    } else {
      t->normal_.emplace(t->pieces_[id], static_cast<uint32_t>(id));
    }
  }
  for (auto id : {v.bos, v.eos}) {
    if (id && *id >= n) return Status::InvalidArgument("SentencePiece bos/eos id outside the vocabulary");
  }
  t->bos_ = v.bos;
  t->eos_ = v.eos;
  t->add_bos_ = v.add_bos && v.bos.has_value();
  return t;
}

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromLlama2cFile(const std::string& path,
                                                                                       uint32_t vocab_size) {
  KVSTASH_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  ByteReader r(file->bytes());
  auto bad = [&](const std::string& m) { return Status::Corruption("tokenizer.bin " + path + ": " + m); };
  uint32_t max_len = 0;
  if (!r.U32(&max_len)) return bad("truncated header");
  SentencePieceVocab v;
  v.bos = 1;
  v.eos = 2;
  if (vocab_size < 3) return Status::InvalidArgument("llama2.c vocabulary needs at least 3 tokens");
  for (uint32_t id = 0; id < vocab_size; ++id) {
    uint32_t score_bits = 0, len = 0;
    std::span<const uint8_t> b;
    if (!r.U32(&score_bits) || !r.U32(&len)) return bad("truncated at token " + std::to_string(id));
    if (len > max_len || !r.Take(len, &b)) return bad("token " + std::to_string(id) + " has a bad length");
    v.scores.push_back(FromBits(score_bits));
    v.pieces.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
  }
  if (r.remaining() != 0) return bad(std::to_string(r.remaining()) + " trailing bytes after the vocabulary");
  return Create(std::move(v));
}

Result<std::vector<uint32_t>> SentencePieceTokenizer::Encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  if (add_bos_) ids.push_back(*bos_);
  if (text.empty()) return ids;
  const size_t first = ids.size();
  std::string s = " ";
  s.append(text);
  for (const CodeUnit& cu : DecodeUtf8(s)) {
    auto it = normal_.find(s.substr(cu.offset, cu.len));
    if (cu.valid && it != normal_.end()) {
      ids.push_back(it->second);
      continue;
    }
    for (uint32_t k = 0; k < cu.len; ++k) {
      const int id = byte_id_[static_cast<uint8_t>(s[cu.offset + k])];
      if (id < 0) return Status::InvalidArgument("text needs a byte token the vocabulary lacks");
      ids.push_back(static_cast<uint32_t>(id));
    }
  }
  std::string cat;
  while (true) {
    float best_score = -1e30f;
    size_t best_i = SIZE_MAX;
    uint32_t best_id = 0;
    for (size_t i = first; i + 1 < ids.size(); ++i) {
      if (byte_value_[ids[i]] >= 0 || byte_value_[ids[i + 1]] >= 0) continue;  // bytes never merge
      cat.assign(pieces_[ids[i]]).append(pieces_[ids[i + 1]]);
      auto it = normal_.find(cat);
      if (it != normal_.end() && scores_[it->second] > best_score) {
        best_score = scores_[it->second];
        best_i = i;
        best_id = it->second;
      }
    }
    if (best_i == SIZE_MAX) break;
    ids[best_i] = best_id;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_i) + 1);
  }
  return ids;
}

Result<std::string> SentencePieceTokenizer::Decode(std::span<const uint32_t> ids) const {
  std::string out;
  bool first_piece = true;
  for (uint32_t id : ids) {
    if (id >= pieces_.size()) {
      return Status::InvalidArgument("token id " + std::to_string(id) + " outside the vocabulary");
    }
    if (control_[id]) continue;
    if (byte_value_[id] >= 0) {
      out.push_back(static_cast<char>(byte_value_[id]));
    } else {
      const std::string& p = pieces_[id];
      out.append(first_piece && !p.empty() && p[0] == ' ' ? p.substr(1) : p);
    }
    first_piece = false;
  }
  return out;
}

}  // namespace kvstash::model
