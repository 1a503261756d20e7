// Constants of the kvstash rANS bitstream (docs/format/rans.md), shared by the CPU
// encoder, the CPU decoders (scalar, AVX2) and the CUDA decoder.
//
// READ ME FIRST (the surprises, after ryg_rans):
//  - 32 interleaved rANS states ("lanes"). Symbol i is coded by lane i % 32, so a
//    stream decodes as one CUDA warp or as four AVX2 registers of 8 lanes.
//  - Each state is 32 bits, kept in [2^16, 2^32); renormalisation moves exactly one
//    16-bit word at a time (with precision <= 15 one word always suffices).
//  - The encoder runs over the symbols BACKWARDS and pushes words on a stack; the
//    stream stores them in the order the decoder pops them, so the decoder reads
//    forward.
//  - Within a group of 32 symbols the decoder first decodes every lane's symbol
//    (lanes in ascending order, each reading its renormalisation word right away),
//    and only then the raw values of the escaped lanes (ascending again). Word order
//    in the stream follows exactly this sequence.
//  - The encoder starts every state at 2^16; a valid stream therefore ends with all
//    32 decoder states equal to 2^16 and every word consumed. The decoders check
//    both, which catches most corruption for free.
//
// Thread-safety: constants only.
#pragma once

#include <bit>
#include <cstdint>

namespace kvstash::entropy {

static_assert(std::endian::native == std::endian::little,
              "the rANS stream is little-endian and read with memcpy");

// Interleaved states per stream (= CUDA warp size).
inline constexpr int kRansLanes = 32;
// Lower bound L of a normalised state: states live in [L, 2^32).
inline constexpr uint32_t kRansStateLow = 1u << 16;
// Bits moved per renormalisation step.
inline constexpr int kRansWordBits = 16;
// Bytes of the stream header: the 32 initial decoder states, u32 little-endian.
inline constexpr int kRansHeaderBytes = kRansLanes * 4;
// Supported probability precisions P (frequencies sum to 2^P).
inline constexpr int kMinPrecision = 10;
inline constexpr int kMaxPrecision = 15;
// Largest alphabet: symbols are at most 16-bit values.
inline constexpr int kMaxSymbolBits = 16;

// Decoder slot entry layout (TableSet::decode_entries()): bits 0..15 frequency,
// bits 16..30 bias = slot - cumulative frequency, bit 31 = escape symbol.
inline constexpr uint32_t kSlotFreqMask = 0xFFFFu;
inline constexpr int kSlotBiasShift = 16;
inline constexpr uint32_t kSlotBiasMask = 0x7FFFu;
inline constexpr uint32_t kSlotEscapeBit = 1u << 31;

}  // namespace kvstash::entropy
