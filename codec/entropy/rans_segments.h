// Segment framing: a long symbol stream cut into independent rANS streams of
// segment_symbols symbols each, so that segments decode in parallel (one CUDA warp or
// one CPU thread per segment). Byte layout (docs/format/rans.md, "Segmented stream"):
//   u64 num_symbols, u32 segment_symbols, u32 num_segments,
//   u32 byte size of each segment's stream [num_segments],
//   the segment streams back to back (each: rans.h stream of its symbols).
// Segment s holds symbols [s * segment_symbols, min(num_symbols, (s+1) * segment_symbols))
// and uses the same TableSet and the matching slice of the table-index array.
// Cost: 132 bytes per segment (32 flushed states + its size).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/entropy/rans.h"
#include "kvstash/result.h"

namespace kvstash::entropy {

// Default segment length: 64 Ki symbols keeps the framing overhead near 0.2% of an
// 8-bit stream at 8 bits/symbol while giving a GPU one warp per 64 Ki symbols.
inline constexpr uint32_t kDefaultSegmentSymbols = 65536;

// Parsed directory of a segmented stream. offsets has num_segments + 1 entries: byte
// offsets of the segments' streams from the start of the framed bytes.
struct SegmentDirectory {
  uint64_t num_symbols = 0;
  uint32_t segment_symbols = 0;
  std::vector<uint64_t> offsets;
  uint32_t num_segments() const { return static_cast<uint32_t>(offsets.size() - 1); }
  // Symbols in segment s.
  uint32_t SegmentLength(uint32_t s) const;
};

// Encodes and appends a segmented stream to *out. Errors: InvalidArgument for
// segment_symbols not a positive multiple of 32, and as RansEncodeAppend.
Status RansEncodeSegmentedAppend(std::span<const uint16_t> symbols,
                                 std::span<const uint16_t> table_index, const TableSet& tables,
                                 uint32_t segment_symbols, std::vector<uint8_t>* out);
Status RansEncodeSegmentedAppend(std::span<const uint8_t> symbols,
                                 std::span<const uint16_t> table_index, const TableSet& tables,
                                 uint32_t segment_symbols, std::vector<uint8_t>* out);

// Parses and checks the directory: Corruption when the header is short, the segment
// count does not match num_symbols / segment_symbols, a segment is shorter than its
// 128-byte header or odd-sized, or the sizes do not add up to the remaining bytes.
Result<SegmentDirectory> ParseSegmentDirectory(std::span<const uint8_t> framed);

// Decodes a segmented stream of exactly out.size() symbols (Corruption if the
// directory says otherwise); other errors as RansDecode.
Status RansDecodeSegmented(std::span<const uint8_t> framed, std::span<const uint16_t> table_index,
                           const TableSet& tables, std::span<uint16_t> out,
                           RansDecoder decoder = RansDecoder::kAuto);
Status RansDecodeSegmented(std::span<const uint8_t> framed, std::span<const uint16_t> table_index,
                           const TableSet& tables, std::span<uint8_t> out,
                           RansDecoder decoder = RansDecoder::kAuto);

}  // namespace kvstash::entropy
