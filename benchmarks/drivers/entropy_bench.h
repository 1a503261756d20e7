// The entropy-coding benchmark behind `kvstash-bench entropy` (and the streams used by
// benchmarks/codec/): realistic symbol streams, rANS at several table sizes with both
// CPU decoders, and the baselines zstd -19 (libzstd) and a static Huffman code.
//
// Streams (fixed seeds; symbols drawn by inverse CDF from std::mt19937_64):
//   laplace_b{1,4,16}, gaussian_s{1,4,16}: 8-bit two's-complement residuals from the
//     cell-integrated pmf; model q = that pmf.
//   gaussian16_s300: 16-bit two's-complement residuals, sigma 300.
//   smollm2_bf16_bytes: the bytes of real bf16 model values (options.bf16_sample_path,
//     benchmarks/data/smollm2_token_embd_bf16.bin), one table; model q = the stream's
//     own byte histogram (the table's cost is not counted).
//   smollm2_bf16_bytes_split: the same bytes with two tables selected per symbol by
//     byte position (low/high byte of each bf16), q = per-position histograms.
//   smollm2_bf16_values: the same data as 16-bit symbols, q = value histogram.
// Per row: ideal bits/symbol = mean of -log2 q(symbol) over the stream; actual = coded
// bytes * 8 / symbols; overhead_pct = 100 * (actual / ideal - 1); MB/s = symbol bytes
// (1 per symbol for alphabets <= 8 bits, else 2) / median time over `repeats`
// single-threaded runs. Time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), i.e.
// throughput per core, so that other load on a shared machine does not count. Every rANS and zstd run is checked to round-trip.
// Huffman rows give the size of an optimal static prefix code (code lengths from
// Huffman's algorithm, table not counted); it has no coder here, so no speeds.
//
// Thread-safety: RunEntropyBench is reentrant; it uses one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::bench {

struct EntropyBenchOptions {
  // Symbols per synthetic stream. Default: 1,000,000.
  size_t symbols = 1000000;
  // Timed runs per measurement (median reported). Default: 7.
  int repeats = 7;
  // Probability precisions (table sizes 2^P) to run. Default: 10, 12, 15.
  std::vector<int> precisions = {10, 12, 15};
  // File with little-endian bf16 values of a real model; empty skips those streams.
  std::string bf16_sample_path;
  // Only run streams whose name contains this. Default: all.
  std::string filter;
};

struct EntropyBenchRow {
  std::string name;  // "<stream>/<coder>", e.g. "laplace_b4/rans_p12_avx2"
  uint64_t symbols = 0;
  double ideal_bits_per_symbol = 0;
  double actual_bits_per_symbol = 0;
  double overhead_pct = 0;
  std::optional<double> encode_mb_s;  // nullopt: not measured (Huffman size only)
  std::optional<double> decode_mb_s;
};

// Errors: IOError when the bf16 sample cannot be read; Internal when a coder fails to
// round-trip (a bug).
Result<std::vector<EntropyBenchRow>> RunEntropyBench(const EntropyBenchOptions& options);

// Bits of an optimal static prefix code for symbols with these counts (Huffman's
// algorithm; ties broken by lower symbol). When only one symbol occurs it is charged
// one bit per occurrence; no symbols cost 0.
uint64_t HuffmanCodeBits(const std::vector<uint64_t>& counts);

// Whether this build has htscodecs (libhtscodecs-dev): then every 8-bit stream also
// gets the rows htscodecs_r4x16_o0 and htscodecs_r32x16_o0 (its order-0 rANS, 4-way and
// 32-way with the library's own SIMD decoder choice) on the same symbols.
bool HtscodecsBuiltIn();

}  // namespace kvstash::bench
