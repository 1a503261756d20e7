// AVX-512 rANS decoder: the 32 lanes as two registers of 16 states. Compiled with the
// AVX-512 flags of codec/CMakeLists.txt (*_avx512.cc) and entered only after a CPUID
// check (rans_decode.cc: AVX-512 F, BW, DQ and VL, allowed by KVSTASH_CPU_PATH).
//
// Per register and group: one gather of the slot entries (two without TableSet's
// packed layout: entries and symbols), the state update, then the lanes that
// renormalise are a mask register (vpcmpud) and the next popcount(mask) 16-bit words
// go to those lanes in ascending lane order with one vpexpandd, exactly the scalar
// reference's word order (the technique of the 32-way rANS decoders of htscodecs,
// J. Bonfield, "The Scalable rANS Codecs for CRAM", 2021). The step is latency-bound
// (each group's gathers wait for the previous group's states), so the critical path
// is kept short, again after htscodecs: the next slot comes from the expanded words
// (whose low bits equal the new state's), and the product freq * (x >> P) takes two
// vpmuludq (5 cycles, even and odd lanes) instead of one vpmulld (10 cycles).
// Escapes of one-table streams are decoded in registers as well (vpexpandd again);
// other escapes, the last partial group and groups near the stream end use the shared
// scalar code (rans_decode_internal.h), so output and errors equal the reference's.
#include <immintrin.h>

#include "codec/entropy/rans_decode_internal.h"

namespace kvstash::entropy::internal {
namespace {

// Per-stream constants of the kernel.
struct Kernel {
  const int* entries;  // packed_entries() or decode_entries()
  const int* symbols;  // decode_symbols() (unpacked layout only)
  const uint16_t* table_index;
  __m128i shift_p;         // P
  __m128i freq_shift;      // packed: 32 - P (freq of the even lanes)
  __m128i freq_shift_odd;  // packed: 64 - P (freq of the odd lanes)
  __m128i bias_shift;      // packed: 32 - 2P
  __m512i slot_mask;       // 2^P - 1
  __m512i field_mask;      // packed: 2^(32 - 2P) - 1
  __m512i marker;          // packed: the escape marker
  __m512i low16;
  __m512i bias_mask;
  __m512i state_low;
  __m512i last_table;    // u16 lanes: the largest valid table index
  __m128i value_bits;    // symbol_bits (escapes)
  __m512i value_mask;    // 2^symbol_bits - 1
  __m512i first_symbol;  // table 0's direct range (escapes without a table index)
  __m512i num_direct;
};

Kernel MakeKernel(const DecodeInput& in, bool packed) {
  const int p = in.tables->precision();
  Kernel k;
  k.entries =
      reinterpret_cast<const int*>(packed ? in.tables->packed_entries() : in.tables->decode_entries());
  k.symbols = reinterpret_cast<const int*>(in.tables->decode_symbols());
  k.table_index = in.table_index;
  k.shift_p = _mm_cvtsi32_si128(p);
  k.freq_shift = _mm_cvtsi32_si128(32 - p);
  k.freq_shift_odd = _mm_cvtsi32_si128(64 - p);
  k.bias_shift = _mm_cvtsi32_si128(32 - 2 * p);
  k.slot_mask = _mm512_set1_epi32((1 << p) - 1);
  k.field_mask = _mm512_set1_epi32(static_cast<int>((uint64_t{1} << (32 - 2 * p)) - 1));
  k.marker = _mm512_set1_epi32(static_cast<int>(in.tables->packed_escape_marker()));
  k.low16 = _mm512_set1_epi32(0xFFFF);
  k.bias_mask = _mm512_set1_epi32(static_cast<int>(kSlotBiasMask));
  k.state_low = _mm512_set1_epi32(static_cast<int>(kRansStateLow));
  k.last_table = _mm512_set1_epi16(static_cast<int16_t>(in.tables->size() - 1));
  const int bits = in.tables->symbol_bits();
  k.value_bits = _mm_cvtsi32_si128(bits);
  k.value_mask = _mm512_set1_epi32((1 << bits) - 1);
  k.first_symbol = _mm512_set1_epi32(static_cast<int>(in.tables->table(0).first_symbol()));
  k.num_direct = _mm512_set1_epi32(static_cast<int>(in.tables->table(0).num_direct()));
  return k;
}

// The table indices of the group at `first`, shifted left by P, for each register.
// False when one is out of range.
inline bool TableShifts(const Kernel& k, size_t first, __m512i table[2]) {
  if (k.table_index == nullptr) {
    table[0] = table[1] = _mm512_setzero_si512();
    return true;
  }
  const __m512i t = _mm512_loadu_si512(k.table_index + first);
  if (_mm512_cmpgt_epu16_mask(t, k.last_table) != 0) return false;
  table[0] = _mm512_sll_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(t)), k.shift_p);
  table[1] = _mm512_sll_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(t, 1)), k.shift_p);
  return true;
}

// The symbol step of 16 lanes before renormalisation: returns freq * (x >> P) + bias
// and sets the symbols and the escape lanes (for the packed layout: the lanes with the
// marker, a superset; see PackedEscapes).
template <bool kPacked>
inline __m512i Step(const Kernel& k, __m512i x, __m512i slot, __m512i* sym, __mmask16* escape) {
  const __m512i e = _mm512_i32gather_epi32(slot, k.entries, 4);
  __m512i freq_even, freq_odd, bias;  // freq of lane 2i / 2i + 1 in the low half of qword i
  if constexpr (kPacked) {
    *sym = _mm512_and_si512(e, k.field_mask);
    *escape = _mm512_cmpeq_epi32_mask(*sym, k.marker);
    freq_even = _mm512_srl_epi32(e, k.freq_shift);
    freq_odd = _mm512_srl_epi64(e, k.freq_shift_odd);
    bias = _mm512_and_si512(_mm512_srl_epi32(e, k.bias_shift), k.slot_mask);
  } else {
    *sym = _mm512_and_si512(_mm512_i32gather_epi32(slot, k.symbols, 2), k.low16);
    *escape = _mm512_movepi32_mask(e);
    freq_even = _mm512_and_si512(e, k.low16);
    freq_odd = _mm512_srli_epi64(freq_even, 32);
    bias = _mm512_and_si512(_mm512_srli_epi32(e, kSlotBiasShift), k.bias_mask);
  }
  // Products < 2^32: each fits the low half of its qword.
  const __m512i xs = _mm512_srl_epi32(x, k.shift_p);
  const __m512i even = _mm512_mul_epu32(freq_even, xs);
  const __m512i odd = _mm512_mul_epu32(freq_odd, _mm512_srli_epi64(xs, 32));
  return _mm512_add_epi32(_mm512_or_si512(even, _mm512_slli_epi64(odd, 32)), bias);
}

// Renormalises the lanes of `s` below 2^16 with the next words at *p (ascending lane
// order) and advances *p. *low receives a vector whose low 16 bits equal the new
// states' (the word where a lane renormalised), which the next slot needs sooner.
inline __m512i Refill(const Kernel& k, __m512i s, const uint8_t** p, __m512i* low) {
  const __mmask16 renorm = _mm512_cmplt_epu32_mask(s, k.state_low);
  const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(*p)));
  *low = _mm512_mask_expand_epi32(s, renorm, words);
  *p += 2 * __builtin_popcount(static_cast<unsigned>(renorm));
  return _mm512_mask_or_epi32(s, renorm, _mm512_slli_epi32(s, 16), *low);
}

inline void StoreSymbols(__m512i s, uint16_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(s));
}
inline void StoreSymbols(__m512i s, uint8_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(s));
}
inline void StoreSymbols(__m512i s, __mmask16 lanes, uint16_t* out) {
  _mm512_mask_cvtepi32_storeu_epi16(out, lanes, s);
}
inline void StoreSymbols(__m512i s, __mmask16 lanes, uint8_t* out) {
  _mm512_mask_cvtepi32_storeu_epi8(out, lanes, s);
}

// DecodeEscapes in registers, for streams of one table (no table index): each escaped
// lane (bit j of `escapes` = lane j) takes the low symbol_bits of its state as its
// value and renormalises from the words after the group's symbol words, in ascending
// lane order. Reads at most 32 words past *p. Corruption (DecodeEscapes' message) for
// a value inside the table's direct range.
// Always inlined: a call would take the addresses of x and low and keep the states of
// the hot loop in memory.
template <typename OutT>
[[gnu::always_inline]] inline Status EscapesOneTable(const Kernel& k, uint32_t escapes, const uint8_t** p,
                                                     __m512i x[2], __m512i low[2], OutT* out) {
  __mmask16 inside = 0;
#pragma GCC unroll 2
  for (int r = 0; r < 2; ++r) {
    const auto lanes = static_cast<__mmask16>(escapes >> (16 * r));
    const __m512i value = _mm512_and_si512(x[r], k.value_mask);
    const __m512i rest = _mm512_srl_epi32(x[r], k.value_bits);
    const __mmask16 renorm = _mm512_mask_cmplt_epu32_mask(lanes, rest, k.state_low);
    const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(*p)));
    *p += 2 * __builtin_popcount(static_cast<unsigned>(renorm));
    const __m512i next = _mm512_mask_or_epi32(rest, renorm, _mm512_slli_epi32(rest, 16),
                                              _mm512_maskz_expand_epi32(renorm, words));
    x[r] = _mm512_mask_mov_epi32(x[r], lanes, next);
    low[r] = _mm512_mask_mov_epi32(low[r], lanes, next);
    const __m512i direct = _mm512_and_si512(_mm512_sub_epi32(value, k.first_symbol), k.value_mask);
    inside |= _mm512_mask_cmplt_epu32_mask(lanes, direct, k.num_direct);
    StoreSymbols(value, lanes, out + 16 * r);
  }
  if (inside != 0) return Status::Corruption("rANS: escaped value inside the table's direct range");
  return Status::Ok();
}

template <typename OutT, bool kPacked>
Status DecodeAvx512Impl(const DecodeInput& in, OutT* out) {
  DecodeCursor c;
  KVSTASH_RETURN_IF_ERROR(InitCursor(in, &c));
  const Kernel k = MakeKernel(in, kPacked);
  const size_t n = in.num_symbols;
  __m512i x[2], low[2];
  for (int r = 0; r < 2; ++r) low[r] = x[r] = _mm512_loadu_si512(c.x + 16 * r);
  size_t base = 0;
  for (; base + kRansLanes <= n; base += kRansLanes) {
    // Each register reads at most 16 words (32 bytes) past the cursor for its symbols
    // and 16 more for its escapes.
    if (c.end - c.p < 4 * kRansLanes) {
      for (int r = 0; r < 2; ++r) _mm512_storeu_si512(c.x + 16 * r, x[r]);
      KVSTASH_RETURN_IF_ERROR(DecodeGroupChecked(in, base, kRansLanes, &c, out));
      for (int r = 0; r < 2; ++r) low[r] = x[r] = _mm512_loadu_si512(c.x + 16 * r);
      continue;
    }
    __m512i table[2], slot[2], s[2], sym[2];
    __mmask16 escape[2];
    if (!TableShifts(k, base, table)) return TableIndexError();
#pragma GCC unroll 2
    for (int r = 0; r < 2; ++r) {
      slot[r] = _mm512_ternarylogic_epi32(low[r], k.slot_mask, table[r], 0xEA);  // (a & b) | c
      s[r] = Step<kPacked>(k, x[r], slot[r], &sym[r], &escape[r]);
    }
    const uint8_t* p = c.p;  // a local: the symbol stores may alias the cursor
#pragma GCC unroll 2
    for (int r = 0; r < 2; ++r) x[r] = Refill(k, s[r], &p, &low[r]);
    c.p = p;
#pragma GCC unroll 2
    for (int r = 0; r < 2; ++r) StoreSymbols(sym[r], out + base + 16 * r);
    uint32_t escapes = static_cast<uint32_t>(escape[0]) | static_cast<uint32_t>(escape[1]) << 16;
    if (kPacked && escapes != 0) {
      uint32_t slots[kRansLanes];
      for (int r = 0; r < 2; ++r) _mm512_storeu_si512(slots + 16 * r, slot[r]);
      escapes = PackedEscapes(*in.tables, slots, escapes);
    }
    if (escapes != 0 && k.table_index == nullptr) {
      KVSTASH_RETURN_IF_ERROR(EscapesOneTable(k, escapes, &c.p, x, low, out + base));
    } else if (escapes != 0) {
      for (int r = 0; r < 2; ++r) _mm512_storeu_si512(c.x + 16 * r, x[r]);
      KVSTASH_RETURN_IF_ERROR(DecodeEscapes(in, base, escapes, &c, out));
      for (int r = 0; r < 2; ++r) low[r] = x[r] = _mm512_loadu_si512(c.x + 16 * r);
    }
  }
  for (int r = 0; r < 2; ++r) _mm512_storeu_si512(c.x + 16 * r, x[r]);
  if (base < n) {
    KVSTASH_RETURN_IF_ERROR(DecodeGroupChecked(in, base, static_cast<int>(n - base), &c, out));
  }
  return FinishCursor(c);
}

}  // namespace

template <typename OutT>
Status DecodeAvx512(const DecodeInput& in, OutT* out) {
  return in.tables->packed_entries() != nullptr ? DecodeAvx512Impl<OutT, true>(in, out)
                                                : DecodeAvx512Impl<OutT, false>(in, out);
}

template Status DecodeAvx512<uint8_t>(const DecodeInput&, uint8_t*);
template Status DecodeAvx512<uint16_t>(const DecodeInput&, uint16_t*);

}  // namespace kvstash::entropy::internal
