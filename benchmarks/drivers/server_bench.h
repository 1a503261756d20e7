// `kvstash-bench server`: throughput and latency of a kvstash server against a
// redis-server baseline on the same payloads, clients and machine.
//
// What it does
//   1. Starts `kvstash-server` (memory tier only; next to this binary unless
//      --server-bin) and `redis-server` (Debian; --save '' --appendonly no) on free
//      loopback ports, or uses --server HOST:PORT for an already running kvstash.
//   2. Builds `prefixes` prefix chains of `chunks` chunks each; every chunk is a codec-raw
//      payload of a SmolLM2-135M KV chunk shape (30 layers x 3 KV heads x 64, bf16,
//      `chunk_tokens` tokens) whose bytes are real SmolLM2 bf16 weights
//      (benchmarks/data/smollm2_token_embd_bf16.bin, tiled). PUTs them (SET on redis).
//   3. Runs timed phases with `clients` concurrent closed-loop clients (the closed-loop
//      LOOKUP phase gives each client a thread making sync calls, as GET/PUT and redis
//      do, --lookup-driver threads, the default; --lookup-driver async drives them as
//      callback agents on the client library's I/O threads, whose latency then includes
//      client-side queueing; --ops picks phases) (GET/PUT and the
//      redis GET/SET alternate in 4 rounds of seconds/4 each, both servers up, so that
//      background load on the machine weighs on both systems alike), each picking a
//      prefix with Zipf(s) popularity over 1.25 x `prefixes` ranks (the ranks beyond
//      the stored ones are never-seen prefixes, i.e. misses):
//        kvstash LOOKUP  the prefix's chain plus 2 never-stored chunks
//        kvstash GET     one chunk of the prefix (stored prefixes only)
//        kvstash PUT     one chunk of the prefix (overwrite)
//        redis   GET / SET the same chunk bytes under the same keys (hiredis)
//   4. Prints and writes (--json) one row per (system, op): system, op, clients,
//      req_s, mb_s, p50_us, p99_us, plus requests, errors, seconds, mode
//      (closed-loop, or open-loop with offered_req_s: the LOOKUP phase at --lookup-rate
//      per client) and (LOOKUP) hit_rate = tokens hit / tokens looked up. Every GET reply is checked
//      byte-for-byte against the payload that was stored (round trip verified). Rows
//      also say `driver` (async or threads).
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/result.h"

namespace kvstash::bench {

struct ServerBenchOptions {
  std::string server;  // empty: start our own
  std::string server_bin, redis_bin = "redis-server";
  std::string data_file;
  uint32_t clients = 64;
  uint32_t prefixes = 64;
  uint32_t chunks = 4;
  uint32_t chunk_tokens = 32;
  double zipf_s = 1.0;
  double seconds = 4.0;
  // Open-loop LOOKUP phase: each client issues this many LOOKUPs per second on a fixed
  // schedule; latency counts from the scheduled send time (no coordinated omission).
  // 0: skip. Default: 100.
  double lookup_rate = 100;
  bool skip_redis = false;
  // Phases to run (profiling one of them): lookup, get, put. Default: all three.
  std::vector<std::string> ops = {"lookup", "get", "put"};
  // How the closed-loop LOOKUP clients are driven: "async" (RunAgents) or "threads"
  // (one thread per client making sync calls, as the GET/PUT phases and redis).
  std::string lookup_driver = "threads";
  bool Runs(const std::string& op) const {
    return std::find(ops.begin(), ops.end(), op) != ops.end();
  }
};

struct ServerBenchResult {
  nlohmann::json rows;      // one object per (system, op), fields as above
  uint64_t mismatches = 0;  // GET replies that differed from the stored bytes
};

// Runs the benchmark; progress lines go to `log`. Errors: Unavailable when the payload
// file, a server or a connection cannot be had (the message says which).
// Thread-safety: one run at a time per process (it spawns and stops child processes).
Result<ServerBenchResult> RunServerBench(const ServerBenchOptions& options, std::ostream& log);

}  // namespace kvstash::bench
