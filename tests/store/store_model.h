// Model-based randomised test of a Store: random Put / Lookup / Get / Delete / Pin /
// Unpin on branching prefix chains, with evictions forced by small budgets, checked
// against a std::map model of what was put and not deleted.
#pragma once

#include <cstdint>

#include "store/store_options.h"

namespace kvstash::store::testing {

struct ModelRunOptions {
  uint64_t ops = 100000;
  uint64_t seed = 1;
  int chains = 48;          // distinct prefix chains (branching off 12 base chains)
  int max_chunks = 6;       // chunks per chain
  int full_check_every = 1000;
};

// Runs the model against a Store opened with `options`, asserting (gtest) on every
// divergence. `reopen` is called every ops/4 operations when set, to close and reopen
// the store (T1 only) and check the index survived.
void RunStoreModel(const StoreOptions& options, const ModelRunOptions& run, bool reopen);

}  // namespace kvstash::store::testing
