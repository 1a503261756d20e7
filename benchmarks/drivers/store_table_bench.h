// The store's benchmark table behind `kvstash-bench store --json FILE` (issue 6).
//
// Rows (name, value, unit):
//   key_hash_ns_per_token        ComputeChunkKeys over a 128k-token prompt (SHA-256
//                                chain, 256-token chunks), median of runs
//   lookup_{1k,32k,128k}_{p50,p99}_us
//                                Store::Lookup(namespace, tokens) of a stored prefix
//                                with its chunks on T1 (T0 off), key hashing included
//   lookup_{1k,32k,128k}_p99_cpu_us
//                                the same, thread CPU time (excludes preemption)
//   lookup_keys_128k_p99_us      the same with precomputed keys (index only)
//   put_mb_s_T0/T1, get_mb_s_T0/T1
//                                256-token chunks of SmolLM2 size in codec-compressed
//                                form (2.4 MB; the bf16 chunk is 5.9 MB raw), Get
//                                bytes verified against what was Put
//   put_mb_s_T2, get_mb_s_T2     the Redis tier alone (with --redis HOST:PORT)
//   index_bytes_per_chunk, index_mb_per_million_chunks
//                                index memory measured on 500k stored chunks
// Payload bytes are pseudo-random: the store treats payloads as opaque bytes and
// neither compresses nor inspects them, so their content does not change its speed.
//
// Errors: IOError when the scratch folder cannot be made; store and Redis errors.
// Thread-safety: one run at a time (it times the machine).
#pragma once

#include <string>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::bench {

struct StoreTableBenchOptions {
  std::string dir;    // scratch directory for RocksDB. Default: "" (a temp dir)
  std::string redis;  // host:port for the T2 rows. Default: "" (T2 rows skipped)
  int chunks = 24;    // 2.4 MB chunks per throughput run. Default: 24.
};

struct StoreBenchRow {
  std::string name;
  double value;
  std::string unit;
};

Result<std::vector<StoreBenchRow>> RunStoreTableBench(const StoreTableBenchOptions& options);

}  // namespace kvstash::bench
