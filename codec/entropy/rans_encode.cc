// rANS encoder (the reference: every decoder reproduces its input symbols).
//
// Per group of 32 symbols, walked from the last group to the first, the encoder
// applies the inverse of the decoder's steps in reverse order: first the escaped
// lanes' raw values (lanes descending), then every lane's table symbol (lanes
// descending). Each step first renormalises (pushes the low 16 bits of the state when
// the step would overflow it), then updates the state:
//   table symbol (freq f, cum c, precision P): x' = (x / f) << P | (x % f) + c,
//     renormalise while x >= f << (32 - P)   [ryg_rans rans_word.h, L = 2^16]
//   raw value v of k = symbol_bits bits:       x' = x << k | v,
//     renormalise while x >= 2^(32 - k)       [the same step with f = 1, P = k]
// One push always suffices because x < 2^32 and the bound is >= 2^16.
#include <algorithm>
#include <cstring>
#include <string>

#include "codec/entropy/rans.h"
#include "codec/entropy/rans_format.h"

namespace kvstash::entropy {
namespace {

template <typename SymT>
Status Validate(std::span<const SymT> symbols, std::span<const uint16_t> table_index,
                const TableSet& tables) {
  if (!table_index.empty() && table_index.size() != symbols.size()) {
    return Status::InvalidArgument("rANS encode: " + std::to_string(table_index.size()) +
                                   " table indices for " + std::to_string(symbols.size()) +
                                   " symbols");
  }
  const uint32_t alphabet = 1u << tables.symbol_bits();
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i] >= alphabet) {
      return Status::InvalidArgument("rANS encode: symbol " + std::to_string(symbols[i]) +
                                     " at " + std::to_string(i) + " outside a " +
                                     std::to_string(tables.symbol_bits()) + "-bit alphabet");
    }
  }
  for (size_t i = 0; i < table_index.size(); ++i) {
    if (table_index[i] >= tables.size()) {
      return Status::InvalidArgument("rANS encode: table index " +
                                     std::to_string(table_index[i]) + " at " +
                                     std::to_string(i) + " >= " +
                                     std::to_string(tables.size()) + " tables");
    }
  }
  return Status::Ok();
}

template <typename SymT>
Status Encode(std::span<const SymT> symbols, std::span<const uint16_t> table_index,
              const TableSet& tables, std::vector<uint8_t>* out) {
  KVSTASH_RETURN_IF_ERROR(Validate(symbols, table_index, tables));
  const size_t n = symbols.size();
  const int precision = tables.precision();
  const int k = tables.symbol_bits();
  const uint32_t raw_limit = 1u << (32 - k);
  const uint32_t* enc = tables.encode_entries();

  // At most two words per symbol (table step + raw step).
  std::vector<uint16_t> words(2 * n);
  uint16_t* const words_end = words.data() + words.size();
  uint16_t* p = words_end;
  uint32_t x[kRansLanes];
  std::fill(x, x + kRansLanes, kRansStateLow);

  uint32_t entry[kRansLanes];
  for (size_t group = (n + kRansLanes - 1) / kRansLanes; group-- > 0;) {
    const size_t base = group * kRansLanes;
    const int lanes = static_cast<int>(std::min<size_t>(kRansLanes, n - base));
    uint32_t escapes = 0;
    for (int j = 0; j < lanes; ++j) {
      const uint32_t t = table_index.empty() ? 0 : table_index[base + j];
      const FrequencyTable& table = tables.table(t);
      const uint32_t d = table.DirectIndex(symbols[base + j]);
      if (d == table.num_direct()) escapes |= 1u << j;
      entry[j] = enc[tables.encode_offset(t) + d];
    }
    for (int j = lanes - 1; j >= 0; --j) {
      if ((escapes >> j & 1u) == 0) continue;
      uint32_t s = x[j];
      if (s >= raw_limit) {
        *--p = static_cast<uint16_t>(s);
        s >>= kRansWordBits;
      }
      x[j] = s << k | symbols[base + j];
    }
    for (int j = lanes - 1; j >= 0; --j) {
      const uint32_t freq = entry[j] & 0xFFFFu;
      const uint32_t cum = entry[j] >> 16;
      uint32_t s = x[j];
      if (s >= freq << (32 - precision)) {
        *--p = static_cast<uint16_t>(s);
        s >>= kRansWordBits;
      }
      x[j] = ((s / freq) << precision) + (s % freq) + cum;
    }
  }

  const size_t num_words = static_cast<size_t>(words_end - p);
  const size_t start = out->size();
  out->resize(start + kRansHeaderBytes + 2 * num_words);
  uint8_t* dst = out->data() + start;
  std::memcpy(dst, x, kRansHeaderBytes);  // little-endian host (rans_format.h)
  if (num_words != 0) std::memcpy(dst + kRansHeaderBytes, p, 2 * num_words);
  return Status::Ok();
}

}  // namespace

Status RansEncodeAppend(std::span<const uint16_t> symbols, std::span<const uint16_t> table_index,
                        const TableSet& tables, std::vector<uint8_t>* out) {
  return Encode(symbols, table_index, tables, out);
}
Status RansEncodeAppend(std::span<const uint8_t> symbols, std::span<const uint16_t> table_index,
                        const TableSet& tables, std::vector<uint8_t>* out) {
  return Encode(symbols, table_index, tables, out);
}

Result<std::vector<uint8_t>> RansEncode(std::span<const uint16_t> symbols,
                                        std::span<const uint16_t> table_index,
                                        const TableSet& tables) {
  std::vector<uint8_t> out;
  KVSTASH_RETURN_IF_ERROR(Encode(symbols, table_index, tables, &out));
  return out;
}
Result<std::vector<uint8_t>> RansEncode(std::span<const uint8_t> symbols,
                                        std::span<const uint16_t> table_index,
                                        const TableSet& tables) {
  std::vector<uint8_t> out;
  KVSTASH_RETURN_IF_ERROR(Encode(symbols, table_index, tables, &out));
  return out;
}

}  // namespace kvstash::entropy
