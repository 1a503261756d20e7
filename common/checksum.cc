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
// standard CRC is ~process(~previous). The protocol checks every frame body with it.
//
// The instruction has a latency of 3 cycles and a throughput of 1, so one dependent
// stream runs at a third of its speed (~8 GB/s). Buffers of 3 * kStripe bytes or more
// are therefore cut into groups of three consecutive stripes coded as three
// independent streams, then joined: the register update is linear over GF(2),
// r(A || B) = Shift(r(A), |B|) ^ r_0(B) where r_0 starts from 0 and Shift(x, n) is the
// state reached from x after n zero bytes (the technique of Intel's "Fast CRC
// Computation for iSCSI Polynomial Using CRC32 Instruction", 2011, and of zlib's
// crc32_combine). Shift by kStripe bytes is a fixed linear map, applied with four
// 256-entry tables built once from the instruction itself.
constexpr size_t kStripe = 4096;

__attribute__((target("sse4.2"))) uint64_t CrcRun(uint64_t crc, const uint8_t* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    crc = _mm_crc32_u64(crc, v);
  }
  uint32_t c = static_cast<uint32_t>(crc);
  for (; n > 0; ++p, --n) c = _mm_crc32_u8(c, *p);
  return c;
}

// kShift[k][b] = Shift(b << 8k, kStripe), so Shift(x) = XOR over k of kShift[k][byte k of x].
struct ShiftTables {
  uint32_t t[4][256];
};

__attribute__((target("sse4.2"))) ShiftTables MakeShiftTables() {
  static const uint8_t kZeros[kStripe] = {};
  uint32_t column[32];
  for (int i = 0; i < 32; ++i) column[i] = static_cast<uint32_t>(CrcRun(1u << i, kZeros, kStripe));
  ShiftTables s{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t v = 0;
      for (int i = 0; i < 8; ++i) {
        if (b >> i & 1u) v ^= column[8 * k + i];
      }
      s.t[k][b] = v;
    }
  }
  return s;
}

inline uint32_t Shift(const ShiftTables& s, uint32_t x) {
  return s.t[0][x & 0xFF] ^ s.t[1][x >> 8 & 0xFF] ^ s.t[2][x >> 16 & 0xFF] ^ s.t[3][x >> 24];
}

__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const uint8_t* p, size_t n, uint32_t previous) {
  static const ShiftTables kShift = MakeShiftTables();
  uint64_t crc = previous ^ 0xFFFFFFFFu;
  for (; n >= 3 * kStripe; p += 3 * kStripe, n -= 3 * kStripe) {
    uint64_t c0 = crc, c1 = 0, c2 = 0;
    for (size_t i = 0; i < kStripe; i += 8) {
      uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kStripe + i, 8);
      std::memcpy(&v2, p + 2 * kStripe + i, 8);
      c0 = _mm_crc32_u64(c0, v0);
      c1 = _mm_crc32_u64(c1, v1);
      c2 = _mm_crc32_u64(c2, v2);
    }
    crc = Shift(kShift, Shift(kShift, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1)) ^
          static_cast<uint32_t>(c2);
  }
  return static_cast<uint32_t>(CrcRun(crc, p, n)) ^ 0xFFFFFFFFu;
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
