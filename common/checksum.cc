#include "common/checksum.h"

#include <xxhash.h>

#include <boost/crc.hpp>

namespace kvstash {

uint64_t Xxh3_64(std::span<const uint8_t> data) {
  return XXH3_64bits(data.data(), data.size());
}

uint64_t Xxh3_64(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

uint32_t Crc32c(std::span<const uint8_t> data, uint32_t previous) {
  // Boost's crc_optimal takes its initial remainder un-reflected; a finished reflected
  // CRC is reflect(remainder) ^ xorout, so continuing from `previous` means seeding
  // with reflect(previous ^ xorout). previous == 0 gives the standard init 0xFFFFFFFF.
  using Crc = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;
  uint32_t x = previous ^ 0xFFFFFFFFu, seed = 0;
  for (int i = 0; i < 32; ++i, x >>= 1) seed = (seed << 1) | (x & 1u);
  Crc crc(seed);
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

struct Xxh3Hasher::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Xxh3Hasher::Xxh3Hasher() : state_(std::make_unique<State>()) { XXH3_64bits_reset(state_->s); }
Xxh3Hasher::~Xxh3Hasher() = default;

void Xxh3Hasher::Update(std::span<const uint8_t> data) {
  XXH3_64bits_update(state_->s, data.data(), data.size());
}

uint64_t Xxh3Hasher::Digest() const { return XXH3_64bits_digest(state_->s); }

}  // namespace kvstash
