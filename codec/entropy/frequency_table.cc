#include "codec/entropy/frequency_table.h"

#include <string>

#include "codec/entropy/rans_format.h"
#include "common/byte_io.h"

namespace kvstash::entropy {

Result<FrequencyTable> FrequencyTable::Create(int precision, int symbol_bits,
                                              uint32_t first_symbol,
                                              std::vector<uint32_t> freqs,
                                              uint32_t escape_freq) {
  if (precision < kMinPrecision || precision > kMaxPrecision) {
    return Status::InvalidArgument("frequency table: precision " + std::to_string(precision) +
                                   " outside 10..15");
  }
  if (symbol_bits < 1 || symbol_bits > kMaxSymbolBits) {
    return Status::InvalidArgument("frequency table: symbol_bits " +
                                   std::to_string(symbol_bits) + " outside 1..16");
  }
  const uint64_t alphabet = uint64_t{1} << symbol_bits;
  if (freqs.empty() || freqs.size() > alphabet) {
    return Status::InvalidArgument("frequency table: " + std::to_string(freqs.size()) +
                                   " direct symbols for an alphabet of " +
                                   std::to_string(alphabet));
  }
  if (first_symbol >= alphabet) {
    return Status::InvalidArgument("frequency table: first symbol outside the alphabet");
  }
  const bool full = freqs.size() == alphabet;
  if (full != (escape_freq == 0)) {
    return Status::InvalidArgument(
        full ? "frequency table: a table covering the whole alphabet has no escape"
             : "frequency table: a partial range needs an escape frequency >= 1");
  }
  uint64_t total = escape_freq;
  for (uint32_t f : freqs) {
    if (f == 0) return Status::InvalidArgument("frequency table: zero frequency");
    total += f;
  }
  if (total != (uint64_t{1} << precision)) {
    return Status::InvalidArgument("frequency table: frequencies sum to " +
                                   std::to_string(total) + ", not 2^" +
                                   std::to_string(precision));
  }
  FrequencyTable t;
  t.precision_ = precision;
  t.symbol_bits_ = symbol_bits;
  t.first_symbol_ = first_symbol;
  t.escape_freq_ = escape_freq;
  t.freqs_ = std::move(freqs);
  return t;
}

double FrequencyTable::Probability(uint32_t symbol) const {
  const double scale = 1.0 / static_cast<double>(1u << precision_);
  const uint32_t d = DirectIndex(symbol);
  if (d < num_direct()) return freqs_[d] * scale;
  return escape_freq_ * scale / static_cast<double>(1u << symbol_bits_);
}

std::vector<uint8_t> FrequencyTable::Serialize() const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.U8(static_cast<uint8_t>(precision_));
  w.U8(static_cast<uint8_t>(symbol_bits_));
  w.U16(static_cast<uint16_t>(first_symbol_));
  w.U32(num_direct());
  w.U16(static_cast<uint16_t>(escape_freq_));
  for (uint32_t f : freqs_) w.U16(static_cast<uint16_t>(f));  // f < 2^15 (total 2^P, P <= 15, >= 2 entries)
  return out;
}

Result<FrequencyTable> FrequencyTable::Parse(std::span<const uint8_t> bytes, size_t* consumed) {
  ByteReader r(bytes);
  uint8_t precision = 0, symbol_bits = 0;
  uint16_t first = 0, escape = 0;
  uint32_t n = 0;
  if (!r.U8(&precision) || !r.U8(&symbol_bits) || !r.U16(&first) || !r.U32(&n) ||
      !r.U16(&escape)) {
    return Status::Corruption("frequency table: truncated header");
  }
  if (n > (1u << kMaxSymbolBits) || r.remaining() < uint64_t{n} * 2) {
    return Status::Corruption("frequency table: truncated frequencies");
  }
  std::vector<uint32_t> freqs(n);
  for (uint32_t& f : freqs) {
    uint16_t v = 0;
    (void)r.U16(&v);
    f = v;
  }
  auto t = Create(precision, symbol_bits, first, std::move(freqs), escape);
  if (!t.ok()) return Status::Corruption(t.status().message());
  if (consumed != nullptr) *consumed = r.pos();
  return t;
}

}  // namespace kvstash::entropy
