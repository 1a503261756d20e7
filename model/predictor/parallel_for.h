// ParallelFor: the spec predictors' one way of spreading independent items over
// threads (spec_predictor.cc, spec_predictor_ggml.cc). Each item is computed by exactly
// one worker, so results never depend on the thread count.
// Thread-safety: body must be safe to call concurrently for distinct i.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/worker_threads.h"

namespace kvstash::model {

// Runs body(worker, i) for i in [0, n) over `threads` workers (worker w takes i = w,
// w + t, ...; each i is computed by exactly one worker, so results do not depend on
// the split). Returns the number of workers used.
template <typename Body>
uint32_t ParallelFor(uint32_t n, int threads, Body body) {
  const uint32_t t = static_cast<uint32_t>(std::max(1, std::min<int>(threads, static_cast<int>(n))));
  if (t <= 1) {
    for (uint32_t i = 0; i < n; ++i) body(0u, i);
    return 1;
  }
  RunOnWorkers(t, [&](uint32_t w) {
    for (uint32_t i = w; i < n; i += t) body(w, i);
  });
  return t;
}

}  // namespace kvstash::model
