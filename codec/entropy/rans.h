// rANS entropy coding of symbol streams with per-symbol table selection.
//
// One stream = 32 interleaved 32-bit rANS states with 16-bit renormalisation (layout
// and the surprises: rans_format.h, docs/format/rans.md). Symbol i is coded with table
// table_index[i] of a TableSet (or table 0 for all symbols when table_index is empty).
// Every symbol of the alphabet [0, 2^symbol_bits) is codable with every table (escape).
// The stream does not store the symbol count: the caller knows it (from its container)
// and passes it as out.size() to the decoder.
//
// Decoders: a portable scalar reference and an AVX2 path chosen at run time (CPUID);
// both produce identical output and identical errors for the same input, and both
// reproduce the CPU encoder's symbols bit for bit (the CUDA decoder in gpu_kernels/
// too). On corrupt or truncated input the decoders return Corruption and never read
// outside `stream` or write outside `out`; `out` then holds unspecified symbols.
//
// Algorithm: J. Duda, "Asymmetric numeral systems" (arXiv:1311.2540); interleaving
// and word-wise renormalisation after F. Giesen's ryg_rans (rans_word.h) and
// "Interleaved entropy coders" (arXiv:1402.3392); the warp layout after dietgpu.
//
// Thread-safety: pure functions; a TableSet may be shared by concurrent calls.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/entropy/table_set.h"
#include "kvstash/result.h"

namespace kvstash::entropy {

// Encodes `symbols` and appends the stream to *out. `table_index` is empty (all
// symbols use table 0) or has one entry per symbol.
// Errors (InvalidArgument, *out unchanged): table_index of the wrong length, a table
// index >= tables.size(), a symbol >= 2^symbol_bits.
Status RansEncodeAppend(std::span<const uint16_t> symbols, std::span<const uint16_t> table_index,
                        const TableSet& tables, std::vector<uint8_t>* out);
Status RansEncodeAppend(std::span<const uint8_t> symbols, std::span<const uint16_t> table_index,
                        const TableSet& tables, std::vector<uint8_t>* out);

// As RansEncodeAppend, returning a fresh stream.
Result<std::vector<uint8_t>> RansEncode(std::span<const uint16_t> symbols,
                                        std::span<const uint16_t> table_index,
                                        const TableSet& tables);
Result<std::vector<uint8_t>> RansEncode(std::span<const uint8_t> symbols,
                                        std::span<const uint16_t> table_index,
                                        const TableSet& tables);

// Which CPU decoder runs. kAuto picks AVX-512 (F, BW, DQ, VL) when the CPU has it,
// else AVX2 (with BMI2), else the scalar reference; KVSTASH_CPU_PATH (common/cpu_path.h)
// caps the choice. Every decoder gives the same output and the same errors.
enum class RansDecoder { kAuto, kScalar, kAvx2, kAvx512 };

// True when `decoder` can run on this CPU (kAuto and kScalar always).
bool RansDecoderAvailable(RansDecoder decoder);
// The decoder kAuto resolves to on this CPU (kScalar, kAvx2 or kAvx512).
RansDecoder ResolveRansDecoder(RansDecoder decoder);

// Decodes out.size() symbols from `stream`. `table_index`: as for the encoder.
// Errors: InvalidArgument for a table_index of the wrong length or with an index
// >= tables.size(), an 8-bit output with tables.symbol_bits() > 8; NotSupported for
// kAvx2 / kAvx512 on a CPU without AVX2 / AVX-512; Corruption when `stream` is not a valid stream of
// exactly out.size() symbols (short, trailing words, bad states, an escaped value
// inside its table's direct range).
Status RansDecode(std::span<const uint8_t> stream, std::span<const uint16_t> table_index,
                  const TableSet& tables, std::span<uint16_t> out,
                  RansDecoder decoder = RansDecoder::kAuto);
Status RansDecode(std::span<const uint8_t> stream, std::span<const uint16_t> table_index,
                  const TableSet& tables, std::span<uint8_t> out,
                  RansDecoder decoder = RansDecoder::kAuto);

}  // namespace kvstash::entropy
