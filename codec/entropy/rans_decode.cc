// rANS decoder entry points: input validation and run-time choice of the kernel.
#include <algorithm>
#include <string>

#include "codec/entropy/rans.h"
#include "codec/entropy/rans_decode_internal.h"
#include "common/cpu_path.h"

namespace kvstash::entropy {
namespace {

// InvalidArgument naming the first table index >= tables.size(), if any. Blocks of a
// fixed length (which compilers vectorise at -O2) find the first block with an index
// out of range; the loop below names the first such index.
Status CheckTableIndex(std::span<const uint16_t> table_index, const TableSet& tables) {
  constexpr size_t kBlock = 64;
  size_t checked = 0;
  for (; checked + kBlock <= table_index.size(); checked += kBlock) {
    uint16_t block_max = 0;
    for (size_t k = 0; k < kBlock; ++k) block_max = std::max(block_max, table_index[checked + k]);
    if (block_max >= tables.size()) break;
  }
  for (size_t i = checked; i < table_index.size(); ++i) {
    if (table_index[i] >= tables.size()) {
      return Status::InvalidArgument("rANS decode: table index " +
                                     std::to_string(table_index[i]) + " at " +
                                     std::to_string(i) + " >= " +
                                     std::to_string(tables.size()) + " tables");
    }
  }
  return Status::Ok();
}

// Decodes with the available `resolved` kernel, after the stream's framing checks.
template <typename OutT>
Status RunKernel(std::span<const uint8_t> stream, std::span<const uint16_t> table_index,
                 const TableSet& tables, std::span<OutT> out, RansDecoder resolved) {
  if (stream.size() < static_cast<size_t>(kRansHeaderBytes)) {
    return Status::Corruption("rANS decode: stream shorter than its 128-byte header");
  }
  if ((stream.size() - kRansHeaderBytes) % 2 != 0) {
    return Status::Corruption("rANS decode: odd number of word bytes");
  }
  internal::DecodeInput in;
  in.stream = stream.data();
  in.stream_size = stream.size();
  in.table_index = table_index.empty() ? nullptr : table_index.data();
  in.tables = &tables;
  in.num_symbols = out.size();
#if defined(__x86_64__)
  switch (resolved) {
    case RansDecoder::kAvx512:
      return internal::DecodeAvx512(in, out.data());
    case RansDecoder::kAvx2:
      return internal::DecodeAvx2(in, out.data());
    default:
      break;
  }
#endif
  return internal::DecodeScalar(in, out.data());
}

template <typename OutT>
Status Decode(std::span<const uint8_t> stream, std::span<const uint16_t> table_index, const TableSet& tables,
              std::span<OutT> out, RansDecoder decoder) {
  if (sizeof(OutT) == 1 && tables.symbol_bits() > 8) {
    return Status::InvalidArgument("rANS decode: 8-bit output for a " + std::to_string(tables.symbol_bits()) +
                                   "-bit alphabet");
  }
  if (!table_index.empty() && table_index.size() != out.size()) {
    return Status::InvalidArgument("rANS decode: " + std::to_string(table_index.size()) +
                                   " table indices for " + std::to_string(out.size()) + " symbols");
  }
  // The SIMD kernels check each group's table indices before they use them, which saves
  // a pass over the indices; when such a kernel fails, the indices are checked here so
  // that an index out of range is reported first, as by the scalar path.
  const bool available = RansDecoderAvailable(decoder);
  const RansDecoder resolved = ResolveRansDecoder(decoder);
  if (available && resolved != RansDecoder::kScalar) {
    const Status st = RunKernel(stream, table_index, tables, out, resolved);
    if (!st.ok()) KVSTASH_RETURN_IF_ERROR(CheckTableIndex(table_index, tables));
    return st;
  }
  KVSTASH_RETURN_IF_ERROR(CheckTableIndex(table_index, tables));
  if (!available) {
    return Status::NotSupported(decoder == RansDecoder::kAvx2 ? "rANS decode: this CPU has no AVX2"
                                                              : "rANS decode: this CPU has no AVX-512");
  }
  return RunKernel(stream, table_index, tables, out, RansDecoder::kScalar);
}

}  // namespace

bool RansDecoderAvailable(RansDecoder decoder) {
  switch (decoder) {
    case RansDecoder::kAvx2:
      return CpuMayUseAvx2();
    case RansDecoder::kAvx512:
      return CpuMayUseAvx512();
    default:
      return true;
  }
}

RansDecoder ResolveRansDecoder(RansDecoder decoder) {
  if (decoder != RansDecoder::kAuto) return decoder;
  if (CpuMayUseAvx512()) return RansDecoder::kAvx512;
  return CpuMayUseAvx2() ? RansDecoder::kAvx2 : RansDecoder::kScalar;
}

Status RansDecode(std::span<const uint8_t> stream, std::span<const uint16_t> table_index,
                  const TableSet& tables, std::span<uint16_t> out, RansDecoder decoder) {
  return Decode(stream, table_index, tables, out, decoder);
}
Status RansDecode(std::span<const uint8_t> stream, std::span<const uint16_t> table_index,
                  const TableSet& tables, std::span<uint8_t> out, RansDecoder decoder) {
  return Decode(stream, table_index, tables, out, decoder);
}

}  // namespace kvstash::entropy
