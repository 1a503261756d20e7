#include "codec/entropy/table_set.h"

#include <algorithm>
#include <string>

#include "codec/entropy/rans_format.h"
#include "common/byte_io.h"

namespace kvstash::entropy {

Result<TableSet> TableSet::Create(std::vector<FrequencyTable> tables) {
  if (tables.empty()) return Status::InvalidArgument("table set: no tables");
  if (tables.size() > 65536) {
    return Status::InvalidArgument("table set: more than 65536 tables");
  }
  TableSet s;
  s.precision_ = tables[0].precision();
  s.symbol_bits_ = tables[0].symbol_bits();
  for (const FrequencyTable& t : tables) {
    if (t.precision() != s.precision_ || t.symbol_bits() != s.symbol_bits_) {
      return Status::InvalidArgument(
          "table set: all tables must share precision and symbol_bits");
    }
  }
  const uint32_t slots = 1u << s.precision_;
  // Decoder slot indices must fit a signed 32-bit gather index; 2^28 slots (1.5 GiB of
  // lookup arrays) is far above any sensible use.
  if ((uint64_t{tables.size()} << s.precision_) > (uint64_t{1} << 28)) {
    return Status::InvalidArgument("table set: more than 2^28 decoder slots");
  }
  const uint32_t alphabet_mask = (1u << s.symbol_bits_) - 1u;
  s.decode_entries_.resize(tables.size() * slots);
  s.decode_symbols_.assign(tables.size() * slots + 1, 0);
  s.encode_offsets_.reserve(tables.size());
  for (size_t ti = 0; ti < tables.size(); ++ti) {
    const FrequencyTable& t = tables[ti];
    s.encode_offsets_.push_back(static_cast<uint32_t>(s.encode_entries_.size()));
    uint32_t* entries = s.decode_entries_.data() + ti * slots;
    uint16_t* symbols = s.decode_symbols_.data() + ti * slots;
    uint32_t cum = 0;
    auto add = [&](uint32_t freq, uint16_t symbol, bool escape) {
      s.encode_entries_.push_back(freq | cum << 16);
      for (uint32_t slot = cum; slot < cum + freq; ++slot) {
        entries[slot] = freq | (slot - cum) << kSlotBiasShift | (escape ? kSlotEscapeBit : 0u);
        symbols[slot] = symbol;
      }
      cum += freq;
    };
    for (uint32_t d = 0; d < t.num_direct(); ++d) {
      add(t.freqs()[d], static_cast<uint16_t>((t.first_symbol() + d) & alphabet_mask), false);
    }
    if (t.escape_freq() != 0) add(t.escape_freq(), 0, true);
  }
  s.BuildPacked(tables);
  s.tables_ = std::move(tables);
  return s;
}

namespace {

struct EscapeMarker {
  uint32_t value;
  bool exact;  // no table has `value` as a direct symbol
};

// The escape marker of the packed layout (table_set.h): 2^symbol_bits when the symbol
// field has a spare bit, else the value with the least total frequency as a direct
// symbol over all tables (the smallest such value on ties).
EscapeMarker PackedEscapeMarker(const std::vector<FrequencyTable>& tables, int field_bits) {
  const int symbol_bits = tables[0].symbol_bits();
  if (field_bits > symbol_bits) return EscapeMarker{1u << symbol_bits, true};
  const uint32_t alphabet = 1u << symbol_bits;
  std::vector<uint64_t> cost(alphabet, 0);
  for (const FrequencyTable& t : tables) {
    for (uint32_t d = 0; d < t.num_direct(); ++d) {
      cost[(t.first_symbol() + d) & (alphabet - 1u)] += t.freqs()[d];
    }
  }
  const auto best = std::min_element(cost.begin(), cost.end());
  return EscapeMarker{static_cast<uint32_t>(best - cost.begin()), *best == 0};
}

}  // namespace

void TableSet::BuildPacked(const std::vector<FrequencyTable>& tables) {
  const int field_bits = 32 - 2 * precision_;
  if (field_bits < symbol_bits_) return;
  const EscapeMarker marker = PackedEscapeMarker(tables, field_bits);
  packed_marker_ = marker.value;
  packed_marker_exact_ = marker.exact;
  packed_entries_.resize(decode_entries_.size());
  for (size_t i = 0; i < packed_entries_.size(); ++i) {
    const uint32_t e = decode_entries_[i];
    const uint32_t freq = e & kSlotFreqMask;
    const uint32_t bias = e >> kSlotBiasShift & kSlotBiasMask;
    const uint32_t symbol = (e & kSlotEscapeBit) != 0 ? marker.value : uint32_t{decode_symbols_[i]};
    packed_entries_[i] = symbol | bias << field_bits | freq << (32 - precision_);
  }
}

std::vector<uint8_t> TableSet::Serialize() const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.U32(static_cast<uint32_t>(tables_.size()));
  for (const FrequencyTable& t : tables_) w.Bytes(t.Serialize());
  return out;
}

Result<TableSet> TableSet::Parse(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  uint32_t count = 0;
  if (!r.U32(&count)) return Status::Corruption("table set: truncated count");
  if (count == 0 || count > 65536) {
    return Status::Corruption("table set: table count " + std::to_string(count));
  }
  std::vector<FrequencyTable> tables;
  size_t pos = r.pos();
  for (uint32_t i = 0; i < count; ++i) {
    size_t used = 0;
    auto t = FrequencyTable::Parse(bytes.subspan(pos), &used);
    if (!t.ok()) return t.status().WithContext("table " + std::to_string(i));
    tables.push_back(std::move(t).value());
    pos += used;
  }
  if (pos != bytes.size()) return Status::Corruption("table set: trailing bytes");
  auto s = Create(std::move(tables));
  if (!s.ok()) return Status::Corruption(s.status().message());
  return s;
}

}  // namespace kvstash::entropy
