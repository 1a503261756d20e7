// `kvstash-bench trace` (issue 20 §1): token hit rate against cache budget on real
// prefix-reuse traces (the Mooncake FAST'25 traces in ../shared/traces), per codec,
// per eviction policy, next to a plain exact-LRU simulation over the same blocks.
//
// READ ME FIRST
// - One process: the trace is replayed against an in-process store::Store (no
//   kvstash-server, no network). T0 only by default (T1 off, T2 off): with T1 on, T0
//   is an inclusive cache of T1 (T0 ⊆ T1, store/store_options.h), so the hit rate is
//   decided by the T1 budget alone and the T0 share only changes latency; and writing
//   ~10 M chunks through RocksDB's WAL for 80 configurations does not fit a bench run.
//   `tiers = "t0t1"` puts the budget on T1 (RocksDB in a temp dir) with a T0 cache of
//   `t0_share` of it in front, as a check that the disk tier evicts alike.
// - Keys: block i of a request is ComputeChunkKeys over the request's hash ids with one
//   "token" (the id) per chunk, i.e. the chained SHA-256 of docs/format/keys.md over
//   ids[0..i]; a final partial block (input_length - 512 * (n - 1) < 512 tokens) carries
//   its token count as an extra key, so it never matches a full block of the same id.
// - Per request: Lookup(keys) -> the matched leading run; Get of that run (a restore:
//   Gets are the accesses eviction counts, Lookups are not); Put of the missing tail in
//   one call, its first chunk naming the last matched chunk as parent. Hit tokens are
//   the tokens of the matched blocks (Lookup's matched_tokens, checked equal).
// - Bytes: a block of t tokens is ceil(t * bytes_per_token / byte_scale) bytes, for
//   the store and the simulation alike; budgets are scaled by the same factor. Hit rates
//   depend only on sizes relative to budgets, so the scale (default 8192: a 512-token
//   Llama-3.1-8B bf16 block = 64 MiB becomes 8 KiB) changes nothing but rounding.
//   Payload bytes are pseudo-random (the store treats payloads as opaque bytes); every
//   Get's sizes and first bytes are checked against what was Put.
// - The LRU simulation (SimulateLru) is independent code: std::list + unordered_map
//   over block ids with a byte capacity; a request's prefix hit is the longest run of
//   cached leading blocks; then every block of the request is touched from the last to
//   the first (so a chain's head is the most recent and its tail goes first, as vLLM
//   frees blocks), inserting the missing ones and evicting least recently used blocks
//   until the cache fits. A block larger than the capacity is not cached.
//
// Thread-safety: not reentrant; one run at a time (it times the machine).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "store/store_options.h"

namespace kvstash::bench {

// One request of a trace, as read from a JSONL line.
struct TraceRequest {
  uint64_t input_length = 0;      // tokens
  std::vector<uint32_t> hash_ids;  // one per block of block_tokens
};

// Reads a Mooncake-format JSONL trace (one object a line: input_length, hash_ids).
// Errors: NotFound when the file is absent (the message says where traces live);
// InvalidArgument for a folder or other non-file, a trace without requests, a line that
// is not such an object, a hash id above 2^32 - 1,
// or an input_length that does not fit its hash ids (512 * (n - 1) < len <= 512 * n).
Result<std::vector<TraceRequest>> ReadTrace(const std::string& path, uint32_t block_tokens);

// A trace turned into distinct blocks: every request is a list of block indices.
struct TracePlan {
  std::vector<StoredKey> keys;                 // per distinct block
  std::vector<uint32_t> tokens;                // per distinct block
  std::vector<int32_t> parent;                 // per distinct block; -1: a chain's first
  std::vector<std::vector<uint32_t>> requests;  // block indices, in prefix order
  uint64_t input_tokens = 0;                   // sum of input_length
  uint32_t block_tokens = 512;
};

// Errors: InvalidArgument (block_tokens 0).
Result<TracePlan> BuildTracePlan(const std::vector<TraceRequest>& trace, uint32_t block_tokens);

// Bytes of every distinct block at `bytes_per_token`, divided by `byte_scale`
// (rounded up, at least 1).
std::vector<uint64_t> BlockBytes(const TracePlan& plan, double bytes_per_token,
                                 uint64_t byte_scale);

struct ReplayResult {
  uint64_t hit_tokens = 0;
  uint64_t put_failures = 0;  // Put calls refused (e.g. a tail larger than the budget)
  uint64_t evictions = 0;     // store: T0 + T1 evictions; simulation: blocks evicted
  double seconds = 0;
};

// The plain exact-LRU simulation described above.
ReplayResult SimulateLru(const TracePlan& plan, const std::vector<uint64_t>& bytes,
                         uint64_t capacity_bytes);

// Replays the plan against a Store opened with `options` (the caller sets budgets,
// path and policy). Errors: the Store's Open errors; Internal when a Get misses a chunk
// its Lookup matched or returns other bytes than were Put.
Result<ReplayResult> ReplayStore(const TracePlan& plan, const std::vector<uint64_t>& bytes,
                                 const store::StoreOptions& options);

// A codec's stored bytes per token of the named model, and where the figure is from.
struct TraceCodec {
  std::string name;            // "raw", "spec", "dckv-r8", ...
  double fraction_of_bf16 = 1;  // stored bytes / bf16 bytes, measured on SmolLM2 KV
  std::string source;          // results file and field
};

// raw, spec (bench_codec_spec.json) and dckv at each rate (bench_codec_dckv_fisher_p8.json)
// from `results_dir`. Errors: NotFound / InvalidArgument when a file or row is missing.
Result<std::vector<TraceCodec>> ReadTraceCodecs(const std::string& results_dir);

struct TraceBenchOptions {
  // Trace files. Default: empty = every *.jsonl in ../shared/traces beside the source
  // root (KVSTASH_SOURCE_DIR/../shared/traces).
  std::vector<std::string> traces;
  // Committed codec results. Default: "" = KVSTASH_SOURCE_DIR/benchmarks/results.
  std::string results_dir;
  // Codec names to run (see ReadTraceCodecs). Default: empty = all.
  std::vector<std::string> codecs;
  // Budgets as fractions of the trace's distinct blocks at raw size. Default: 1, 3, 10,
  // 30%.
  std::vector<double> budgets = {0.01, 0.03, 0.10, 0.30};
  // Named model the SmolLM2 ratios are applied to. Default: Llama-3.1-8B (32 layers x
  // 8 KV heads x 128 dims x K,V x 2 bytes = 131,072 bytes per token in bf16).
  std::string model = "Llama-3.1-8B";
  uint32_t model_layers = 32, model_kv_heads = 8, model_head_dim = 128;
  uint32_t block_tokens = 512;  // the traces' block size. Default: 512.
  uint64_t byte_scale = 8192;   // see READ ME FIRST. Default: 8192.
  // "t0" (all the budget on T0) or "t0t1" (budget on T1 in a temp RocksDB dir under
  // `dir`, T0 cache of t0_share of it). Default: "t0".
  std::string tiers = "t0";
  double t0_share = 0.125;  // Default: 0.125.
  std::string dir;          // scratch for RocksDB. Default: "" (system temp dir)
  uint64_t max_requests = 0;  // replay only the first N requests. Default: 0 = all.
  // The Store's eviction knobs (store/store_options.h), for investigating a policy;
  // the committed results use the Store's defaults. Default: 16 and 4096.
  uint32_t eviction_samples = store::StoreOptions{}.eviction_samples;
  uint32_t lfu_decay_accesses = store::StoreOptions{}.lfu_decay_accesses;
};

struct TraceBenchRow {
  std::string trace;    // file name
  std::string codec;
  std::string policy;   // "lfu_decay", "lru" (the Store) or "lru_sim"
  double budget_fraction = 0;
  uint64_t budget_bytes = 0;  // scaled (x byte_scale for real bytes)
  double bytes_per_token = 0;  // model bytes per token of this codec (unscaled)
  uint64_t requests = 0, input_tokens = 0, hit_tokens = 0;
  double token_hit_rate = 0;
  uint64_t put_failures = 0, evictions = 0;
  double seconds = 0, requests_per_s = 0;
};

struct TraceBenchResult {
  std::string setup_json;  // model, figures, scale, traces (a JSON object as text)
  std::vector<TraceBenchRow> rows;
};

// Errors: NotFound when no trace is found (message names ../shared/traces); ReadTrace's,
// ReadTraceCodecs' and ReplayStore's errors; InvalidArgument for unknown codec names,
// budgets outside (0, 1], an unknown `tiers`.
Result<TraceBenchResult> RunTraceBench(const TraceBenchOptions& options);

}  // namespace kvstash::bench
