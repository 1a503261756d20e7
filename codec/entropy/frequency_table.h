// FrequencyTable: integer symbol frequencies of one rANS model, with an escape.
//
// A table codes symbols of an alphabet of 2^symbol_bits values (symbol_bits 1..16) at
// precision P (10..15): frequencies sum to exactly 2^P. It covers a cyclic range of
// "direct" symbols first_symbol, first_symbol + 1, ..., first_symbol + n - 1 (mod
// 2^symbol_bits), each with frequency >= 1. When the range does not cover the whole
// alphabet the table has an escape entry (frequency >= 1): a symbol outside the range
// is coded as the escape followed by its raw symbol_bits-bit value, so EVERY symbol of
// the alphabet is codable with every table. Cyclic ranges let a table centred on 0
// cover both signs of a two's-complement residual.
//
// Tables are immutable values; build them from a pmf with BuildTable()
// (table_builder.h) or from stored frequencies with Create()/Parse().
// Thread-safety: const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::entropy {

class FrequencyTable {
 public:
  // Validates and builds a table. `freqs` are the n direct symbols' frequencies in
  // range order; `escape_freq` is the escape's frequency, which must be 0 exactly when
  // n == 2^symbol_bits. Errors (InvalidArgument): precision outside 10..15,
  // symbol_bits outside 1..16, n == 0 or n > 2^symbol_bits, first_symbol outside the
  // alphabet, a zero frequency, or a total different from 2^precision.
  static Result<FrequencyTable> Create(int precision, int symbol_bits, uint32_t first_symbol,
                                       std::vector<uint32_t> freqs, uint32_t escape_freq);

  // Compact little-endian serialisation (docs/format/rans.md, "Frequency table"):
  // u8 precision, u8 symbol_bits, u16 first_symbol, u32 n, u16 escape_freq, then n
  // u16 frequencies. Parse returns Corruption for short or inconsistent bytes and
  // reports how many bytes it consumed in *consumed.
  std::vector<uint8_t> Serialize() const;
  static Result<FrequencyTable> Parse(std::span<const uint8_t> bytes, size_t* consumed);

  int precision() const { return precision_; }
  int symbol_bits() const { return symbol_bits_; }
  uint32_t first_symbol() const { return first_symbol_; }
  // Number of direct symbols n.
  uint32_t num_direct() const { return static_cast<uint32_t>(freqs_.size()); }
  // 0 when the table covers the whole alphabet (no escape).
  uint32_t escape_freq() const { return escape_freq_; }
  const std::vector<uint32_t>& freqs() const { return freqs_; }
  // Position of `symbol` in the direct range, or num_direct() when it must escape.
  // REQUIRES: symbol < 2^symbol_bits.
  uint32_t DirectIndex(uint32_t symbol) const {
    const uint32_t d = (symbol - first_symbol_) & ((1u << symbol_bits_) - 1u);
    return d < num_direct() ? d : num_direct();
  }
  // Model probability of `symbol` under this table: freq / 2^P for a direct symbol,
  // escape_freq / 2^P / 2^symbol_bits for an escaped one. Used for ideal code lengths.
  double Probability(uint32_t symbol) const;

  bool operator==(const FrequencyTable&) const = default;

 private:
  FrequencyTable() = default;
  int precision_ = 0;
  int symbol_bits_ = 0;
  uint32_t first_symbol_ = 0;
  uint32_t escape_freq_ = 0;
  std::vector<uint32_t> freqs_;
};

}  // namespace kvstash::entropy
