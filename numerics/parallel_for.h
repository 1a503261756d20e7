// The one way kvstash's numerics spread independent work items over threads: the spec
// and dckv codecs, the spec predictors, the int8 GEMMs and spec calibration. Both
// forms run every item exactly once, on one worker, and each item's result may depend
// only on the item (never on which worker or which range ran it), so results are
// bit-identical for every thread count. Threads come from common/worker_threads.h
// (RunOnWorkers: worker 0 is the calling thread; a thread the OS refuses runs on the
// caller instead).
//
// Thread count: `threads` is capped to [1, n] (to 1 when n is 0), so a caller passes
// its own choice (an option, hardware_concurrency, ...) as is.
// Thread-safety: body must be safe to call concurrently for distinct items (and
// distinct workers, for the per-worker scratch it may index by worker).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/worker_threads.h"

namespace kvstash::numerics {

// Runs body(worker, i) for i in [0, n) over min(threads, n) workers (at least 1):
// worker w takes i = w, w + t, w + 2t, ... Returns the number of workers used.
template <typename Body>
uint32_t ParallelFor(uint32_t n, int64_t threads, Body body) {
  const uint32_t t = static_cast<uint32_t>(std::clamp<int64_t>(threads, 1, std::max<uint32_t>(n, 1)));
  if (t <= 1) {
    for (uint32_t i = 0; i < n; ++i) body(0u, i);
    return 1;
  }
  RunOnWorkers(t, [&](uint32_t w) {
    for (uint32_t i = w; i < n; i += t) body(w, i);
  });
  return t;
}

// Runs body(begin, end) over [0, n) split into min(threads, n) contiguous ranges (at
// least 1): range r is [n r / t, n (r + 1) / t), never empty. Nothing runs when n is 0.
template <typename Body>
void ParallelRanges(int n, int threads, Body body) {
  const int t = std::max(1, std::min(threads, n));
  if (t == 1) {
    if (n > 0) body(0, n);
    return;
  }
  RunOnWorkers(static_cast<uint32_t>(t), [&](uint32_t r) {
    const int begin = static_cast<int>(static_cast<int64_t>(n) * r / t);
    const int end = static_cast<int>(static_cast<int64_t>(n) * (r + 1) / t);
    if (begin < end) body(begin, end);
  });
}

}  // namespace kvstash::numerics
