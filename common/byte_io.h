// Little-endian fixed-width encoding into byte buffers, and a bounds-checked reader.
//
// Every stored and wire format in kvstash is little-endian. ByteReader never reads
// past its span: each Read* returns false (and leaves the output untouched) when too
// few bytes remain, so parsers turn short input into Corruption instead of UB.
//
// Thread-safety: ByteReader/ByteWriter objects are not shared between threads.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace kvstash {

// Appends little-endian values to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(v); }
  void U16(uint16_t v) { PutLe(v, 2); }
  void U32(uint32_t v) { PutLe(v, 4); }
  void U64(uint64_t v) { PutLe(v, 8); }
  void Bytes(std::span<const uint8_t> b) { out_->insert(out_->end(), b.begin(), b.end()); }
  void Bytes(std::string_view b) { out_->insert(out_->end(), b.begin(), b.end()); }
  size_t size() const { return out_->size(); }

 private:
  void PutLe(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>* out_;
};

// Reads little-endian values from a span, never past its end.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  bool U8(uint8_t* v) { return GetLe(v, 1); }
  bool U16(uint16_t* v) { return GetLe(v, 2); }
  bool U32(uint32_t* v) { return GetLe(v, 4); }
  bool U64(uint64_t* v) { return GetLe(v, 8); }
  // Takes the next n bytes as a sub-span (no copy).
  bool Take(uint64_t n, std::span<const uint8_t>* out) {
    if (n > remaining()) return false;
    *out = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool Skip(uint64_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  template <typename T>
  bool GetLe(T* v, int n) {
    if (remaining() < static_cast<size_t>(n)) return false;
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    *v = static_cast<T>(x);
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

// Reads a little-endian value at a fixed offset. REQUIRES: offset + sizeof(T) <= size.
template <typename T>
T LoadLe(const uint8_t* p) {
  uint64_t x = 0;
  for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(x);
}
template <typename T>
void StoreLe(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

}  // namespace kvstash
