// `kvstash-bench link` (issue 20 §2): time to restore a SmolLM2 prefix from a
// kvstash-server across a shaped link, per codec, next to recomputing it (prefill), and
// the link speed at which the two are equal (the crossover).
//
// READ ME FIRST
// - The link is two network namespaces (netns_link.h): kvstash-server (memory tier) in
//   one, the client on a thread of this process in the other; tbf for the rate and a
//   userspace delay line for the RTT (this kernel has no netem). Needs root: RunLinkBench
//   returns Unavailable from CheckLinkPrerequisites without CAP_NET_ADMIN, ip/tc or TUN.
// - Prefix: the first `tokens` tokens of the first evaluation-split document
//   (model/corpus/text_corpus.h) long enough, on the reference runtime's SmolLM2; its
//   exact KV from one prefill. Codecs: raw bf16, spec and dckv with the demo's artifacts
//   (demo/demo_artifacts.h: loaded from the cache folder or calibrated once on the
//   calibration split). Every codec's chain is PUT once over the unshaped link.
// - Per rate (RTT fixed), per codec, `reps` repetitions of a restore, each phase timed:
//     lookup     LOOKUP of the chain (all chunks must match)
//     get        the chunks' GETs, pipelined, until the last payload arrives
//                (= server time + transfer); server_get is the server's own GET
//                handling time from /v1/stats (read outside the timed window) and
//                transfer = get - server_get
//     predictor  spec only: the predictor over the prefix tokens
//     decode     codec decode + checksum + assembling the fp32 cache
//     restore    = lookup + get + predictor + decode
//   Medians are reported; wire_ms = stored bytes x 8 / rate, tbf_burst_bytes = the
//   bucket that leaves at once after idle (a GET takes >= (bytes - burst) x 8 / rate). Every GET payload is compared byte for byte with what was
//   PUT, and raw/spec's restored bf16 chunks with the exact KV (dckv is lossy; its
//   decoders verify the content checksum).
// - Connections: a fresh Client per rate (TCP state of another link, e.g. BBR's min RTT,
//   would throttle this one), and one untimed warm-up restore per cell whose wire time
//   is at most 5 s, so TCP is past slow start as on a long-running engine's connection
//   (rows say `warmup`); at slower cells the ramp-up is a few RTTs of many seconds.
// - Repetitions are cut at slow rates: a cell runs floor(max_cell_s / wire time) reps
//   (at least 1, at most `reps`), wire time = stored bytes x 8 / rate; rows say `reps`.
// - recompute: prefills of the same tokens (fresh cache, last-token logits) on the same
//   machine: `recompute_reps` before the link runs and one after every cell, so that a
//   row's restore_over_recompute compares times taken under the same load (the row's
//   recompute_ms is its own cell's; the crossover uses the median of all of them).
// - CPU figures beside the wall times: restore_cpu_ms (process CPU of predictor +
//   decode) and recompute_cpu_ms (of the prefill), and per codec their ratio
//   restore_cpu_over_recompute_cpu: what a restore's local work costs in prefills,
//   independent of other load on a shared machine (wall times are not).
// - Crossover per codec: fixed = the median over the codec's cells of lookup +
//   predictor + decode, plus the GET's excess over the wire time at the fastest rate
//   (round trips, server, relay);
//   crossover rate = stored bits / (recompute - fixed): above it restore beats
//   recompute. None when recompute <= fixed (a restore never wins on this machine).
//   The measured sign change between neighbouring rates is reported beside it.
//
// Thread-safety: one run per process (one NetnsLink per process).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/default_paths.h"
#include "kvstash/result.h"

namespace kvstash::bench {

struct LinkBenchOptions {
  std::string model = DefaultModelPath();  // Default: the SmolLM2-135M fixture.
  std::string server_bin;                  // Default: "" = kvstash-server beside this binary.
  uint32_t tokens = 1500;                  // prefix tokens. Default: 1,500.
  uint32_t chunk_tokens = 256;             // tokens per chunk. Default: 256.
  std::vector<std::string> codecs = {"raw", "spec", "dckv"};  // Default: all three.
  // Link rates (bit/s), run fastest first. Default: 10 G, 1 G, 100 M, 10 M.
  std::vector<double> rates = {10e9, 1e9, 100e6, 10e6};
  double rtt_ms = 20;    // round-trip time. Default: 20 ms.
  uint32_t reps = 5;     // restores per cell at most. Default: 5.
  double max_cell_s = 60;  // wire-time budget per cell (cuts reps). Default: 60 s.
  uint32_t recompute_reps = 5;  // prefills timed. Default: 5.
  int predictor_threads = 2;    // spec predictor threads. Default: 2.
  // Codec artifact cache (demo/demo_artifacts.h). Default: .cache/kvstash-demo.
  std::string artifact_dir = ".cache/kvstash-demo";
};

struct LinkBenchResult {
  nlohmann::json setup;      // model, prefix, codecs' sizes, link, machine
  nlohmann::json rows;       // one per (rate, codec): fields as in the README above
  nlohmann::json crossover;  // one per codec
};

// Progress lines go to `log`. Errors: Unavailable from CheckLinkPrerequisites (no root,
// ip, tc or TUN) or when the server cannot be started; InvalidArgument for an unknown
// codec, no rates, a rate below 8 kbit/s, tokens 0 or longer than every document;
// Internal when a LOOKUP misses, a GET returns other bytes than were PUT, or a lossless
// restore differs from the exact KV; model, codec and client errors.
Result<LinkBenchResult> RunLinkBench(const LinkBenchOptions& options, std::ostream& log);

}  // namespace kvstash::bench
