// What the two recurrent-state benches (spec_state_bench.cc: the real RWKV-7;
// spec_state_bench_hybrid.cc: the tiny hybrid) share: the thread CPU clock they time
// with, the spec coding pass over a list of states (each round trip verified), and the
// row fields of `kvstash-bench codec --codec spec --state` (spec_state_bench.h lists them).
// Thread-safety: pure functions (the clock reads this thread's CPU time).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/spec/spec_state_artifact.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::bench {

// This thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID): a loaded machine does
// not distort the ratios between the steps of a single-threaded run.
double ThreadCpuSeconds();

// Sums over the states of one spec coding pass.
struct SpecStateTotals {
  uint64_t stored_bytes = 0, scalars = 0;
  double encode_s = 0, decode_s = 0, ideal_bits = 0;  // thread CPU seconds; ideal code length
  std::map<std::string, std::pair<double, uint64_t>> kinds;  // tensor kind -> (ideal bits, scalars)
};

// Codes exact[i] against predicted[i] with `artifact` and decodes it back.
// Errors: Internal naming `what` and the state when a state does not round-trip
// byte-exactly; the coder's errors. REQUIRES: exact.size() == predicted.size().
Result<SpecStateTotals> CodeSpecStates(const spec::SpecStateArtifact& artifact,
                                       const std::vector<RecurrentState>& exact,
                                       const std::vector<RecurrentState>& predicted,
                                       const std::string& what);

// The fields every row has: model, part, codec, dtype f32, tokens, boundaries, scalars,
// raw_bytes (4 per scalar), stored_bytes, ratio, ratio_vs_raw, bits_per_scalar,
// lossless (true: only lossless coders make rows).
nlohmann::json StateRow(const std::string& model, const std::string& part, const std::string& codec,
                        uint64_t tokens, uint64_t boundaries, uint64_t scalars, uint64_t stored);

// Adds a spec row's fields: ratio_vs_baseline, ideal_bits_per_scalar, encode_mb_s,
// decode_mb_s (fp32 MB over thread CPU seconds), predictor, predictor_cost_vs_forward,
// artifact_bytes, ideal_bits_per_scalar_by_kind.
void AddSpecStateFields(const SpecStateTotals& totals, uint64_t scalars, uint64_t baseline_bytes,
                        const std::string& predictor, double predictor_cost, uint64_t artifact_bytes,
                        nlohmann::json* row);

}  // namespace kvstash::bench
