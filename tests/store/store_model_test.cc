// The model-based randomised test on the in-memory store (T0 only): >= 100k operations,
// fixed seeds, budgets small enough that evictions (tier and index) happen throughout.
#include <gtest/gtest.h>

#include "store/prefix_index.h"
#include "tests/store/store_model.h"

namespace kvstash::store::testing {
namespace {

TEST(StoreModel, MemoryTierLfu) {
  StoreOptions o;
  o.memory_budget_bytes = 24 << 10;
  o.index_budget_bytes = PrefixIndex::MaxBytesForEntries(200);
  ModelRunOptions run;
  run.ops = 100000;
  run.seed = 11;
  RunStoreModel(o, run, /*reopen=*/false);
}

TEST(StoreModel, MemoryTierLruLargeIndex) {
  StoreOptions o;
  o.memory_budget_bytes = 40 << 10;
  o.eviction = EvictionPolicy::kLru;
  o.eviction_samples = 4;
  ModelRunOptions run;
  run.ops = 100000;
  run.seed = 12;
  RunStoreModel(o, run, /*reopen=*/false);
}

}  // namespace
}  // namespace kvstash::store::testing
