// Lossless coders of the real SmolLM2 KV side by side (`kvstash-bench codec --codec
// lossless-peers`): spec, byte-plane rANS (codec/baselines/byte_plane.h) and the
// general-purpose peers of benchmarks/drivers/peer_coders.h (zstd -3 / -19 on the raw
// bytes, htscodecs order-0 / order-1 rANS on byte planes), on the chunks that `kvstash
// bench codec --codec spec` codes: SmolLM2-135M's fp32 KV of the evaluation corpus
// (model/corpus) in 256-token chunks, stored as bf16, f16 or fp8 e4m3 (one fixed scale
// per (layer, K/V) from the calibration chunks, as the spec codec defines fp8:
// docs/format/spec.md §2, kvstash/kv_chunk.h). spec is calibrated on the calibration
// corpus (disjoint text) first.
//
// Every chunk is decoded by every coder and compared byte for byte (and spec's fp8
// scales): a mismatch is an Internal error, never a row.
// Sizes: raw = the chunks' KV bytes (fp8 scales not counted). spec and byte-plane:
// whole payloads (docs/format/payload.md header, fp8 scales included); the peers: their
// packed bytes plus 4 bytes per fp8 scale (they need them too).
// Times: thread CPU seconds of the coding calls (one thread), so MB/s = raw MB per
// CPU-second, which other load on a shared machine distorts least. spec's encode and
// decode exclude its predictor, which both sides run once per prefix: its time is
// given per token (wall on SpecBenchOptions::threads threads, and process CPU time),
// and decode_with_predictor_mb_s = raw / (decode CPU + predictor CPU).
//
// dump_dir (optional): the evaluation chunks' KV bytes for coders outside this binary
// (benchmarks/lossless_peers.py runs ZipNN on them): one file <dump_dir>/kv-<dtype>.bin
// per dtype = the chunks one after another, each the canonical chunk bytes of
// kvstash/kv_chunk.h (for each layer K then V, [tokens, n_kv_heads, head_dim],
// little-endian elements), no header; the JSON's "dumps" gives path, dtype,
// element_bytes, chunk_bytes and chunks.
//
// Thread-safety: not reentrant (see spec_bench_kv.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmarks/drivers/spec_bench.h"
#include "kvstash/result.h"

namespace kvstash::bench {

struct LosslessPeersBenchOptions {
  // Model, corpus sizes, chunk size, threads and predictor; spec.dtypes: any of bf16,
  // f16, fp8_e4m3.
  SpecBenchOptions spec;
  std::string dump_dir;  // "" = no dump
};

// Returns {"rows": [...], "setup": {...}, "dumps": [...]}; each row: codec, dtype,
// tokens, chunks, raw_bytes, stored_bytes, ratio, bits_per_scalar, encode_mb_s,
// decode_mb_s, lossless (true), and for spec predictor_ms_per_token,
// predictor_cpu_ms_per_token, decode_with_predictor_mb_s.
// Errors: those of loading the model and corpus; Internal when a coder does not
// round-trip; IOError when a dump cannot be written.
Result<nlohmann::json> RunLosslessPeersBench(const LosslessPeersBenchOptions& options);

}  // namespace kvstash::bench
