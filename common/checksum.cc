#include "common/checksum.h"

#include <xxhash.h>

#include <boost/crc.hpp>
#include <cstring>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace kvstash {

uint64_t Xxh3_64(std::span<const uint8_t> data) {
  return XXH3_64bits(data.data(), data.size());
}

uint64_t Xxh3_64(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

namespace {
#if defined(__x86_64__)
// CRC32C with the SSE4.2 CRC32 instruction (which implements exactly CRC-32C, Intel
// SDM vol. 2A "CRC32"): the state is the un-inverted reflected remainder, so the
// standard CRC is ~process(~previous). ~8 GB/s against Boost's ~0.4 GB/s table; the
// protocol checks every frame body with it.
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const uint8_t* p, size_t n,
                                                        uint32_t previous) {
  uint64_t crc = previous ^ 0xFFFFFFFFu;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    crc = _mm_crc32_u64(crc, v);
  }
  uint32_t c = static_cast<uint32_t>(crc);
  for (; n > 0; ++p, --n) c = _mm_crc32_u8(c, *p);
  return c ^ 0xFFFFFFFFu;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif
}  // namespace

uint32_t Crc32c(std::span<const uint8_t> data, uint32_t previous) {
#if defined(__x86_64__)
  if (kHaveSse42) return Crc32cSse42(data.data(), data.size(), previous);
#endif
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
