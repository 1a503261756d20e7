// Fuzzes the rANS decoders (codec/entropy/rans.h) on arbitrary bytes with valid
// tables. A 4-byte prefix picks the configuration: precision (10..15), alphabet
// (1, 4, 8, 12 or 16 bits), symbol count (0..4096) and 1..4 tables selected per
// symbol; the rest is the stream. Requirements: no crash, leak or UB; the scalar and
// SIMD decoders (AVX2, AVX-512) agree on status and symbols; whatever decodes
// re-encodes to exactly the input stream (the format is canonical).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>
#include <vector>

#include "codec/entropy/pmf.h"
#include "codec/entropy/rans.h"
#include "codec/entropy/table_builder.h"

namespace {

using namespace kvstash::entropy;

const TableSet& Tables(int precision, int symbol_bits, int count) {
  static std::map<int, TableSet> cache;
  const int key = precision * 1000 + symbol_bits * 10 + count;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<FrequencyTable> tables;
  for (int t = 0; t < count; ++t) {
    auto pmf = LaplacePmf(symbol_bits, SymbolMapping::kTwosComplement, 0.0, 0.7 + 3.0 * t).value();
    tables.push_back(BuildTable(pmf, {.precision = precision}).value());
  }
  return cache.emplace(key, TableSet::Create(std::move(tables)).value()).first->second;
}

template <typename OutT>
void Check(std::span<const uint8_t> stream, std::span<const uint16_t> idx, const TableSet& tables,
           size_t n) {
  std::vector<OutT> scalar(n), simd(n);
  const kvstash::Status a = RansDecode(stream, idx, tables, std::span<OutT>(scalar), RansDecoder::kScalar);
  for (RansDecoder d : {RansDecoder::kAvx2, RansDecoder::kAvx512}) {
    if (!RansDecoderAvailable(d)) continue;
    const kvstash::Status b = RansDecode(stream, idx, tables, std::span<OutT>(simd), d);
    if (a.code() != b.code()) std::abort();
    if (a.ok() && scalar != simd) std::abort();
  }
  if (a.ok()) {
    auto again = RansEncode(std::span<const OutT>(scalar), idx, tables);
    if (!again.ok() || *again != std::vector<uint8_t>(stream.begin(), stream.end())) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  static constexpr int kBits[] = {1, 4, 8, 12, 16};
  const int precision = 10 + data[0] % 6;
  const int symbol_bits = kBits[(data[0] / 6) % 5];
  const size_t n = (data[1] | data[2] << 8) % 4097;
  const int count = 1 + data[3] % 4;
  const TableSet& tables = Tables(precision, symbol_bits, count);
  std::vector<uint16_t> idx;
  if (count > 1) {
    idx.resize(n);
    for (size_t i = 0; i < n; ++i) idx[i] = static_cast<uint16_t>((i * 7 + i / 5) % count);
  }
  // Copy so that the stream ends exactly at the end of an allocation (ASan).
  const std::vector<uint8_t> stream(data + 4, data + size);
  if (symbol_bits <= 8) Check<uint8_t>(stream, idx, tables, n);
  Check<uint16_t>(stream, idx, tables, n);
  return 0;
}
