// AVX2 rANS decoder: the 32 lanes as four registers of 8 states. Compiled with -mavx2
// (codec/CMakeLists.txt) and entered only after a CPUID check (rans_decode.cc).
//
// Per register: gather the slot entries and symbols (tables flattened so that one
// gather serves 8 different tables; with TableSet's packed layout, P <= 12 for 8-bit
// alphabets, one gather brings frequency, bias and symbol or escape marker at once),
// update the 8 states, then refill the lanes whose state fell below 2^16 from
// consecutive words: the renormalisation mask indexes a table of lane permutations
// that spreads the next popcount(mask) words to those
// lanes in ascending lane order, i.e. exactly the scalar reference's word order.
// Escapes, the last partial group and groups near the stream end use the shared
// scalar code (rans_decode_internal.h), so output and errors match the reference.
#include <immintrin.h>

#include <array>

#include "codec/entropy/rans_decode_internal.h"

namespace kvstash::entropy::internal {
namespace {

// kRefill[m][i] = index of the word lane i takes when lanes `m` renormalise.
constexpr std::array<std::array<uint32_t, 8>, 256> MakeRefillTable() {
  std::array<std::array<uint32_t, 8>, 256> t{};
  for (uint32_t m = 0; m < 256; ++m) {
    uint32_t next = 0;
    for (uint32_t i = 0; i < 8; ++i) {
      t[m][i] = (m >> i & 1u) ? next++ : 0;
    }
  }
  return t;
}
alignas(32) constexpr std::array<std::array<uint32_t, 8>, 256> kRefill = MakeRefillTable();

inline void StoreSymbols(__m256i s, uint16_t* out) {
  const __m256i packed = _mm256_packus_epi32(s, s);  // values <= 0xFFFF: no saturation
  const __m256i ordered = _mm256_permute4x64_epi64(packed, 0b1000);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(ordered));
}
inline void StoreSymbols(__m256i s, uint8_t* out) {
  const __m256i w = _mm256_packus_epi32(s, s);
  const __m256i b = _mm256_packus_epi16(w, w);  // values <= 0xFF (symbol_bits <= 8)
  const uint32_t lo = static_cast<uint32_t>(_mm256_extract_epi32(b, 0));
  const uint32_t hi = static_cast<uint32_t>(_mm256_extract_epi32(b, 4));
  std::memcpy(out, &lo, 4);
  std::memcpy(out + 4, &hi, 4);
}

}  // namespace

template <typename OutT, bool kPacked>
Status DecodeAvx2Impl(const DecodeInput& in, OutT* out) {
  DecodeCursor c;
  KVSTASH_RETURN_IF_ERROR(InitCursor(in, &c));
  const int precision = in.tables->precision();
  const int* entries = reinterpret_cast<const int*>(
      kPacked ? in.tables->packed_entries() : in.tables->decode_entries());
  const int* symbols = reinterpret_cast<const int*>(in.tables->decode_symbols());
  const __m128i shift_p = _mm_cvtsi32_si128(precision);
  const __m128i freq_shift = _mm_cvtsi32_si128(32 - precision);
  const __m128i bias_shift = _mm_cvtsi32_si128(32 - 2 * precision);
  const __m256i field_mask = _mm256_set1_epi32(static_cast<int>((uint64_t{1} << (32 - 2 * precision)) - 1));
  const __m256i slot_mask = _mm256_set1_epi32((1 << precision) - 1);
  const __m256i low16 = _mm256_set1_epi32(0xFFFF);
  const __m256i bias_mask = _mm256_set1_epi32(static_cast<int>(kSlotBiasMask));
  const __m256i marker = _mm256_set1_epi32(static_cast<int>(in.tables->packed_escape_marker()));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i last_table = _mm256_set1_epi16(static_cast<int16_t>(in.tables->size() - 1));
  const size_t n = in.num_symbols;

  __m256i x[4];
  for (int r = 0; r < 4; ++r) {
    x[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c.x + 8 * r));
  }
  size_t base = 0;
  for (; base + kRansLanes <= n; base += kRansLanes) {
    if (c.end - c.p < 2 * kRansLanes) {
      for (int r = 0; r < 4; ++r) _mm256_storeu_si256(reinterpret_cast<__m256i*>(c.x + 8 * r), x[r]);
      KVSTASH_RETURN_IF_ERROR(DecodeGroupChecked(in, base, kRansLanes, &c, out));
      for (int r = 0; r < 4; ++r) x[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c.x + 8 * r));
      continue;
    }
    if (in.table_index != nullptr) {
      // Every index of the group below tables.size() (checked before the gathers).
      const __m256i* t = reinterpret_cast<const __m256i*>(in.table_index + base);
      const __m256i top =
          _mm256_max_epu16(_mm256_max_epu16(_mm256_loadu_si256(t), _mm256_loadu_si256(t + 1)), last_table);
      if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(top, last_table)) != -1) return TableIndexError();
    }
    const uint8_t* p = c.p;
    uint32_t escapes = 0;
    alignas(32) uint32_t slots[kRansLanes];  // packed layout: for PackedEscapes
    for (int r = 0; r < 4; ++r) {
      __m256i slot = _mm256_and_si256(x[r], slot_mask);
      if (in.table_index != nullptr) {
        const __m128i t16 = _mm_loadu_si128(
            reinterpret_cast<const __m128i*>(in.table_index + base + 8 * r));
        slot = _mm256_or_si256(slot, _mm256_sll_epi32(_mm256_cvtepu16_epi32(t16), shift_p));
      }
      const __m256i e = _mm256_i32gather_epi32(entries, slot, 4);
      __m256i sym, freq, bias;
      if constexpr (kPacked) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(slots + 8 * r), slot);
        sym = _mm256_and_si256(e, field_mask);
        const __m256i escape = _mm256_cmpeq_epi32(sym, marker);
        escapes |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(escape))) << (8 * r);
        freq = _mm256_srl_epi32(e, freq_shift);
        bias = _mm256_and_si256(_mm256_srl_epi32(e, bias_shift), slot_mask);
      } else {
        escapes |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(e))) << (8 * r);
        sym = _mm256_and_si256(_mm256_i32gather_epi32(symbols, slot, 2), low16);
        freq = _mm256_and_si256(e, low16);
        bias = _mm256_and_si256(_mm256_srli_epi32(e, kSlotBiasShift), bias_mask);
      }
      const __m256i s =
          _mm256_add_epi32(_mm256_mullo_epi32(freq, _mm256_srl_epi32(x[r], shift_p)), bias);
      const __m256i renorm = _mm256_cmpeq_epi32(_mm256_srli_epi32(s, 16), zero);
      const uint32_t m = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(renorm)));
      const __m256i words = _mm256_permutevar8x32_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(kRefill[m].data())));
      x[r] = _mm256_blendv_epi8(s, _mm256_or_si256(_mm256_slli_epi32(s, 16), words), renorm);
      p += 2 * __builtin_popcount(m);
      StoreSymbols(sym, out + base + 8 * r);
    }
    c.p = p;
    if (kPacked && escapes != 0) escapes = PackedEscapes(*in.tables, slots, escapes);
    if (escapes != 0) {
      for (int r = 0; r < 4; ++r) _mm256_storeu_si256(reinterpret_cast<__m256i*>(c.x + 8 * r), x[r]);
      KVSTASH_RETURN_IF_ERROR(DecodeEscapes(in, base, escapes, &c, out));
      for (int r = 0; r < 4; ++r) x[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c.x + 8 * r));
    }
  }
  for (int r = 0; r < 4; ++r) _mm256_storeu_si256(reinterpret_cast<__m256i*>(c.x + 8 * r), x[r]);
  if (base < n) {
    KVSTASH_RETURN_IF_ERROR(
        DecodeGroupChecked(in, base, static_cast<int>(n - base), &c, out));
  }
  return FinishCursor(c);
}

template <typename OutT>
Status DecodeAvx2(const DecodeInput& in, OutT* out) {
  return in.tables->packed_entries() != nullptr ? DecodeAvx2Impl<OutT, true>(in, out)
                                                : DecodeAvx2Impl<OutT, false>(in, out);
}

template Status DecodeAvx2<uint8_t>(const DecodeInput&, uint8_t*);
template Status DecodeAvx2<uint16_t>(const DecodeInput&, uint16_t*);

}  // namespace kvstash::entropy::internal
