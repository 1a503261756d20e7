// Checksums: XXH3-64 for payload contents (libxxhash), CRC32C (Castagnoli) for
// protocol frames and headers: the SSE4.2 CRC32 instruction in three interleaved
// streams where the CPU has it (checksum.cc), Boost.CRC otherwise; tests compare both.
//
// Sources: XXH3 from the xxHash spec (github.com/Cyan4973/xxHash, doc/xxhash_spec.md);
// CRC32C = CRC-32/ISCSI (RFC 3720 §B.4): poly 0x1EDC6F41, reflected, init and xorout
// 0xFFFFFFFF; check value of "123456789" is 0xE3069283.
//
// Thread-safety: free functions are pure; an Xxh3Hasher object is not shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace kvstash {

// XXH3-64 with seed 0 of `data`.
uint64_t Xxh3_64(std::span<const uint8_t> data);
uint64_t Xxh3_64(std::string_view data);

// CRC32C of `data`, optionally continuing from a previous value returned by Crc32c.
uint32_t Crc32c(std::span<const uint8_t> data, uint32_t previous = 0);

// Streaming XXH3-64 (seed 0): Update() in pieces gives the same digest as one
// Xxh3_64() over the concatenation.
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;

  void Update(std::span<const uint8_t> data);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvstash
