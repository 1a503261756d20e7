// TableSet: the frequency tables one rANS stream may select from, with the flat
// lookup arrays the encoder and the decoders (scalar, AVX2, CUDA) use.
//
// Every symbol of a stream is coded with the table chosen by its table index (u16).
// The decoder needs all indices before it decodes (spec: predicted-spread bucket,
// dckv: component and scale bucket), so the coders take an index array.
//
// All tables of a set share the precision P and the alphabet width symbol_bits.
// Decoder arrays, indexed by (table << P) | slot for slot in [0, 2^P):
//   decode_entries(): u32 = freq | (slot - cum) << 16 | escape << 31 (rans_format.h)
//   decode_symbols(): u16 = the decoded symbol value (for the escape: 0); the array
//                     has 2 bytes of zero padding after its end so that 32-bit
//                     gathers may read it.
//   packed_entries(): u32 = field | (slot - cum) << F | freq << (32 - P), F = 32 - 2P,
//                     where field is the symbol, or for the escape the marker
//                     packed_escape_marker(), so that a SIMD decoder needs one gather
//                     per symbol instead of two (the frequency on top takes one shift,
//                     as in htscodecs' packed decoder table). Only when
//                     2P + symbol_bits <= 32 (8-bit alphabets: P <= 12), else
//                     empty. The marker is 2^symbol_bits when the field has a spare
//                     bit (2P + symbol_bits <= 31), otherwise the symbol value with the
//                     least total frequency as a direct symbol over all tables. Unless
//                     packed_marker_exact() (no table codes the marker directly), a
//                     lane with the marker is an escape only where decode_entries()
//                     says so.
// Encoder array, indexed by encode_offset(table) + direct index (the escape is at
// index num_direct()): u32 = freq | cum << 16.
// Memory: 6 * 2^P bytes per table for decoding (10 with the packed layout), 4 * (n + 1) for encoding.
// The decoder arrays of 2 MiB or more sit in transparent huge pages where the kernel
// grants them (common/huge_page_allocator.h): SIMD decoders gather from random slots.
//
// Thread-safety: immutable after Create(); const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/entropy/frequency_table.h"
#include "common/huge_page_allocator.h"
#include "kvstash/result.h"

namespace kvstash::entropy {

class TableSet {
 public:
  // Errors (InvalidArgument): no tables, more than 65536 tables, more than 2^28 decoder
  // slots in all (size() << precision()), or tables that differ in precision or
  // symbol_bits.
  static Result<TableSet> Create(std::vector<FrequencyTable> tables);

  // Serialisation: u32 table count, then each table's FrequencyTable::Serialize().
  // Parse returns Corruption on bad bytes (including trailing bytes).
  std::vector<uint8_t> Serialize() const;
  static Result<TableSet> Parse(std::span<const uint8_t> bytes);

  int precision() const { return precision_; }
  int symbol_bits() const { return symbol_bits_; }
  size_t size() const { return tables_.size(); }
  const FrequencyTable& table(size_t i) const { return tables_[i]; }

  const uint32_t* decode_entries() const { return decode_entries_.data(); }
  const uint16_t* decode_symbols() const { return decode_symbols_.data(); }
  // nullptr when the packed layout does not fit (see above).
  const uint32_t* packed_entries() const {
    return packed_entries_.empty() ? nullptr : packed_entries_.data();
  }
  // The field value of the escape entries in packed_entries() (meaningful only when
  // packed_entries() is not nullptr), and whether no table codes it as a direct symbol.
  uint32_t packed_escape_marker() const { return packed_marker_; }
  bool packed_marker_exact() const { return packed_marker_exact_; }
  // Number of entries in each decoder array (size() << precision()).
  size_t num_slots() const { return decode_entries_.size(); }
  const uint32_t* encode_entries() const { return encode_entries_.data(); }
  uint32_t encode_offset(size_t table) const { return encode_offsets_[table]; }

 private:
  TableSet() = default;
  // Fills packed_entries_ (and the marker) from the decoder arrays when the layout fits.
  void BuildPacked(const std::vector<FrequencyTable>& tables);
  int precision_ = 0;
  int symbol_bits_ = 0;
  std::vector<FrequencyTable> tables_;
  std::vector<uint32_t, HugePageAllocator<uint32_t>> decode_entries_;
  std::vector<uint16_t, HugePageAllocator<uint16_t>> decode_symbols_;  // num_slots() + 1 (padding)
  std::vector<uint32_t, HugePageAllocator<uint32_t>> packed_entries_;  // num_slots() or empty
  std::vector<uint32_t> encode_entries_;
  std::vector<uint32_t> encode_offsets_;
  uint32_t packed_marker_ = 0;
  bool packed_marker_exact_ = true;
};

}  // namespace kvstash::entropy
