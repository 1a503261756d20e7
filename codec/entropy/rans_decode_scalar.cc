// Portable scalar rANS decoder: the reference the AVX2 and CUDA decoders must match.
//
// Decoder step of lane j (precision P, slot = x & (2^P - 1) in table t):
//   entry = decode_entries[t << P | slot];  symbol = decode_symbols[...]
//   x' = freq * (x >> P) + (slot - cum)
//   if x' < 2^16: x' = x' << 16 | next word
// Full groups with at least 32 words left take a branch-free path (no bounds checks
// are needed: a group's table steps read at most 32 words); everything else goes
// through DecodeGroupChecked.
#include "codec/entropy/rans_decode_internal.h"

namespace kvstash::entropy::internal {

template <typename OutT>
Status DecodeScalar(const DecodeInput& in, OutT* out) {
  DecodeCursor c;
  KVSTASH_RETURN_IF_ERROR(InitCursor(in, &c));
  const int precision = in.tables->precision();
  const uint32_t slot_mask = (1u << precision) - 1u;
  const uint32_t* entries = in.tables->decode_entries();
  const uint16_t* symbols = in.tables->decode_symbols();
  const size_t n = in.num_symbols;
  size_t base = 0;
  for (; base + kRansLanes <= n; base += kRansLanes) {
    if (c.end - c.p < 2 * kRansLanes) {
      KVSTASH_RETURN_IF_ERROR(DecodeGroupChecked(in, base, kRansLanes, &c, out));
      continue;
    }
    const uint16_t* idx = in.table_index == nullptr ? nullptr : in.table_index + base;
    const uint8_t* p = c.p;
    uint32_t escapes = 0;
    for (int j = 0; j < kRansLanes; ++j) {
      const uint32_t t = idx == nullptr ? 0 : idx[j];
      const uint32_t x = c.x[j];
      const uint32_t slot = t << precision | (x & slot_mask);
      const uint32_t e = entries[slot];
      out[base + j] = static_cast<OutT>(symbols[slot]);
      escapes |= (e >> 31) << j;
      const uint32_t s = (e & kSlotFreqMask) * (x >> precision) +
                         (e >> kSlotBiasShift & kSlotBiasMask);
      // Branch-free refill (a branch here mispredicts on every other symbol):
      // shift by 0 or 16 and mask the word with 0 or ~0.
      const uint32_t renorm = s < kRansStateLow ? 1u : 0u;
      c.x[j] = s << (kRansWordBits * renorm) | (LoadU16(p) & (0u - renorm));
      p += 2 * renorm;
    }
    c.p = p;
    if (escapes != 0) KVSTASH_RETURN_IF_ERROR(DecodeEscapes(in, base, escapes, &c, out));
  }
  if (base < n) {
    KVSTASH_RETURN_IF_ERROR(
        DecodeGroupChecked(in, base, static_cast<int>(n - base), &c, out));
  }
  return FinishCursor(c);
}

template Status DecodeScalar<uint8_t>(const DecodeInput&, uint8_t*);
template Status DecodeScalar<uint16_t>(const DecodeInput&, uint16_t*);

}  // namespace kvstash::entropy::internal
