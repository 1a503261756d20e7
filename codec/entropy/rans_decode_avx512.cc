// AVX-512 rANS decoder: the 32 lanes as two registers of 16 states. Compiled with the
// AVX-512 flags of codec/CMakeLists.txt (*_avx512.cc) and entered only after a CPUID
// check (rans_decode.cc: AVX-512 F, BW, DQ and VL, allowed by KVSTASH_CPU_PATH).
//
// The same steps as rans_decode_avx2.cc, twice as wide, with two AVX-512 instructions
// where AVX2 needs tables: the lanes that renormalise are a mask register
// (vpcmpud), and the next popcount(mask) 16-bit words go to those lanes in ascending
// lane order with one vpexpandd, exactly the scalar reference's word order (the
// technique of the 32-way rANS decoders of htscodecs, Bonfield 2021). Escapes, the last
// partial group and groups near the stream end use the shared scalar code
// (rans_decode_internal.h), so output and errors equal the reference's.
#include <immintrin.h>

#include "codec/entropy/rans_decode_internal.h"

namespace kvstash::entropy::internal {
namespace {

inline void StoreSymbols(__m512i s, uint16_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(s));
}
inline void StoreSymbols(__m512i s, uint8_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(s));
}

template <typename OutT, bool kPacked>
Status DecodeAvx512Impl(const DecodeInput& in, OutT* out) {
  DecodeCursor c;
  KVSTASH_RETURN_IF_ERROR(InitCursor(in, &c));
  const int precision = in.tables->precision();
  const int* entries = reinterpret_cast<const int*>(
      kPacked ? in.tables->packed_entries() : in.tables->decode_entries());
  const int* symbols = reinterpret_cast<const int*>(in.tables->decode_symbols());
  const __m128i shift_p = _mm_cvtsi32_si128(precision);
  const __m128i shift_2p = _mm_cvtsi32_si128(2 * precision);
  const __m512i slot_mask = _mm512_set1_epi32((1 << precision) - 1);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  const __m512i bias_mask = _mm512_set1_epi32(static_cast<int>(kSlotBiasMask));
  const __m512i symbol_mask = _mm512_set1_epi32((1 << in.tables->symbol_bits()) - 1);
  const __m512i state_low = _mm512_set1_epi32(static_cast<int>(kRansStateLow));
  const size_t n = in.num_symbols;

  __m512i x[2];
  for (int r = 0; r < 2; ++r) x[r] = _mm512_loadu_si512(c.x + 16 * r);
  size_t base = 0;
  for (; base + kRansLanes <= n; base += kRansLanes) {
    // Each register reads at most 16 words (32 bytes) past the cursor.
    if (c.end - c.p < 2 * kRansLanes) {
      for (int r = 0; r < 2; ++r) _mm512_storeu_si512(c.x + 16 * r, x[r]);
      KVSTASH_RETURN_IF_ERROR(DecodeGroupChecked(in, base, kRansLanes, &c, out));
      for (int r = 0; r < 2; ++r) x[r] = _mm512_loadu_si512(c.x + 16 * r);
      continue;
    }
    const uint8_t* p = c.p;
    uint32_t escapes = 0;
    for (int r = 0; r < 2; ++r) {
      __m512i slot = _mm512_and_si512(x[r], slot_mask);
      if (in.table_index != nullptr) {
        const __m256i t16 =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.table_index + base + 16 * r));
        slot = _mm512_or_si512(slot, _mm512_sll_epi32(_mm512_cvtepu16_epi32(t16), shift_p));
      }
      const __m512i e = _mm512_i32gather_epi32(slot, entries, 4);
      escapes |= static_cast<uint32_t>(_mm512_movepi32_mask(e)) << (16 * r);
      __m512i sym, freq, bias;
      if constexpr (kPacked) {
        sym = _mm512_and_si512(_mm512_srl_epi32(e, shift_2p), symbol_mask);
        freq = _mm512_and_si512(e, slot_mask);
        bias = _mm512_and_si512(_mm512_srl_epi32(e, shift_p), slot_mask);
      } else {
        sym = _mm512_and_si512(_mm512_i32gather_epi32(slot, symbols, 2), low16);
        freq = _mm512_and_si512(e, low16);
        bias = _mm512_and_si512(_mm512_srli_epi32(e, kSlotBiasShift), bias_mask);
      }
      const __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(freq, _mm512_srl_epi32(x[r], shift_p)), bias);
      const __mmask16 renorm = _mm512_cmplt_epu32_mask(s, state_low);
      const __m512i words = _mm512_maskz_expand_epi32(
          renorm, _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
      x[r] = _mm512_mask_mov_epi32(s, renorm, _mm512_or_si512(_mm512_slli_epi32(s, 16), words));
      p += 2 * __builtin_popcount(static_cast<unsigned>(renorm));
      StoreSymbols(sym, out + base + 16 * r);
    }
    c.p = p;
    if (escapes != 0) {
      for (int r = 0; r < 2; ++r) _mm512_storeu_si512(c.x + 16 * r, x[r]);
      KVSTASH_RETURN_IF_ERROR(DecodeEscapes(in, base, escapes, &c, out));
      for (int r = 0; r < 2; ++r) x[r] = _mm512_loadu_si512(c.x + 16 * r);
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
