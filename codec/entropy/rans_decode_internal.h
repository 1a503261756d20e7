// Internal to codec/entropy: the pieces every CPU rANS decoder shares (state
// initialisation, the bounds-checked scalar group step, escapes, the final check).
// The public API is rans.h; the decoders are rans_decode_scalar.cc,
// rans_decode_avx2.cc and rans_decode_avx512.cc, all built on these inline functions so that their output and
// errors are identical by construction on tails and escapes (the SIMD kernels' own
// escape code for one-table streams repeats DecodeEscapes' steps and message; the
// round-trip and corruption tests compare every decoder with the scalar one).
//
// Thread-safety: stateless functions over caller-owned buffers.
#pragma once

#include <cstdint>
#include <cstring>

#include "codec/entropy/rans_format.h"
#include "codec/entropy/table_set.h"
#include "kvstash/status.h"

namespace kvstash::entropy::internal {

// Validated decoder input: stream bytes (header + an even number of word bytes),
// table indices (nullptr = table 0 everywhere), the symbol count.
struct DecodeInput {
  const uint8_t* stream = nullptr;
  size_t stream_size = 0;
  const uint16_t* table_index = nullptr;
  const TableSet* tables = nullptr;
  size_t num_symbols = 0;
};

// Decoder position: the 32 states and the word cursor [p, end).
struct DecodeCursor {
  uint32_t x[kRansLanes];
  const uint8_t* p;
  const uint8_t* end;
};

inline Status TableIndexError() { return Status::InvalidArgument("rANS decode: table index out of range"); }

inline uint32_t LoadU16(const uint8_t* p) {
  uint16_t w;
  std::memcpy(&w, p, 2);
  return w;
}

// Reads the header states. Corruption when a state is below 2^16 (the encoder never
// produces one; accepting it would break the state invariant).
inline Status InitCursor(const DecodeInput& in, DecodeCursor* c) {
  std::memcpy(c->x, in.stream, kRansHeaderBytes);
  for (uint32_t s : c->x) {
    if (s < kRansStateLow) return Status::Corruption("rANS: initial state below 2^16");
  }
  c->p = in.stream + kRansHeaderBytes;
  c->end = in.stream + in.stream_size;
  return Status::Ok();
}

// The lanes of `marked` (lanes whose packed entry carries the escape marker, bit j =
// lane j) that are escapes, given the lanes' slot indices: all of them when the marker
// is exact, else those whose decode_entries() slot has the escape bit (table_set.h).
inline uint32_t PackedEscapes(const TableSet& tables, const uint32_t* slots, uint32_t marked) {
  if (tables.packed_marker_exact()) return marked;
  uint32_t escapes = 0;
  for (uint32_t m = marked; m != 0; m &= m - 1) {
    const int j = __builtin_ctz(m);
    if ((tables.decode_entries()[slots[j]] & kSlotEscapeBit) != 0) escapes |= 1u << j;
  }
  return escapes;
}

// Decodes the raw values of the escaped lanes of the group at `base` (bit j of
// `escapes` = lane j), in ascending lane order, with bounds checks.
template <typename OutT>
Status DecodeEscapes(const DecodeInput& in, size_t base, uint32_t escapes, DecodeCursor* c,
                     OutT* out) {
  const int k = in.tables->symbol_bits();
  const uint32_t value_mask = (1u << k) - 1u;
  while (escapes != 0) {
    const int j = __builtin_ctz(escapes);
    escapes &= escapes - 1;
    uint32_t s = c->x[j];
    const uint32_t value = s & value_mask;
    s >>= k;
    if (s < kRansStateLow) {
      if (c->p == c->end) return Status::Corruption("rANS: stream truncated (escape)");
      s = s << kRansWordBits | LoadU16(c->p);
      c->p += 2;
    }
    c->x[j] = s;
    const uint32_t t = in.table_index == nullptr ? 0 : in.table_index[base + j];
    const FrequencyTable& table = in.tables->table(t);
    if (table.DirectIndex(value) != table.num_direct()) {
      return Status::Corruption("rANS: escaped value inside the table's direct range");
    }
    out[base + j] = static_cast<OutT>(value);
  }
  return Status::Ok();
}

// Decodes lanes [0, lanes) of the group at `base` with a bounds check on every word
// read, then its escapes. Used for the last (partial) group and near the stream end.
template <typename OutT>
Status DecodeGroupChecked(const DecodeInput& in, size_t base, int lanes, DecodeCursor* c,
                          OutT* out) {
  const int precision = in.tables->precision();
  const uint32_t slot_mask = (1u << precision) - 1u;
  const uint32_t* entries = in.tables->decode_entries();
  const uint16_t* symbols = in.tables->decode_symbols();
  uint32_t escapes = 0;
  for (int j = 0; j < lanes; ++j) {
    const uint32_t t = in.table_index == nullptr ? 0 : in.table_index[base + j];
    if (t >= in.tables->size()) return TableIndexError();
    const uint32_t slot = t << precision | (c->x[j] & slot_mask);
    const uint32_t e = entries[slot];
    out[base + j] = static_cast<OutT>(symbols[slot]);
    escapes |= (e >> 31) << j;
    uint32_t s = (e & kSlotFreqMask) * (c->x[j] >> precision) +
                 (e >> kSlotBiasShift & kSlotBiasMask);
    if (s < kRansStateLow) {
      if (c->p == c->end) return Status::Corruption("rANS: stream truncated");
      s = s << kRansWordBits | LoadU16(c->p);
      c->p += 2;
    }
    c->x[j] = s;
  }
  return DecodeEscapes(in, base, escapes, c, out);
}

// A valid stream is fully consumed and leaves every state at 2^16.
inline Status FinishCursor(const DecodeCursor& c) {
  if (c.p != c.end) return Status::Corruption("rANS: trailing words after the last symbol");
  for (uint32_t s : c.x) {
    if (s != kRansStateLow) return Status::Corruption("rANS: final state mismatch");
  }
  return Status::Ok();
}

// Decoder kernels; REQUIRES: validated input (rans_decode.cc), except that the SIMD
// kernels check the table indices themselves, each before its first use, and return
// TableIndexError() for one out of range (the caller then names it).
template <typename OutT>
Status DecodeScalar(const DecodeInput& in, OutT* out);
template <typename OutT>
Status DecodeAvx2(const DecodeInput& in, OutT* out);
template <typename OutT>
Status DecodeAvx512(const DecodeInput& in, OutT* out);

}  // namespace kvstash::entropy::internal
