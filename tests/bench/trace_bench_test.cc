// `kvstash-bench trace` (benchmarks/drivers/trace_bench.h) on tiny traces whose hit
// counts are derived by hand, for the plain LRU simulation and the Store replay alike.
#include "benchmarks/drivers/trace_bench.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "tests/support/test_util.h"

namespace kvstash::bench {
namespace {

namespace fs = std::filesystem;

class TraceFile {
 public:
  explicit TraceFile(const std::string& text) {
    path_ = (fs::path(::testing::TempDir()) /
             ("kvstash_trace_test_" + std::to_string(::getpid()) + "_" +
              std::to_string(counter_++) + ".jsonl"))
                .string();
    std::ofstream(path_) << text;
  }
  ~TraceFile() { fs::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// Blocks: A = [1], B = [1,2], B' = [1,3], B'' = [1,3] with a partial 188-token block.
// One byte per token (512 a full block); capacity 1024 bytes = two full blocks.
//   r1 [1,2]  1024 tok: miss, miss.                 cache {A, B}
//   r2 [1,3]  1024 tok: A hit (512); B' evicts B.     cache {A, B'}
//   r3 [1,2]  1024 tok: A hit (512); B evicts B'.     cache {A, B}
//   r4 [1,3]   700 tok: A hit (512); B'' (188 B) is not B': evicts B.  cache {A, B''}
//   r5 [1,3]   700 tok: A, B'' hit (700).
// Hits 0 + 512 + 512 + 512 + 700 = 2236 of 4472 tokens, 3 evictions. In the Store the
// only evictable chunk is always the leaf (A has a child), so both policies agree; in
// the simulation A is touched last (most recent) in every request.
constexpr const char* kTinyTrace =
    R"({"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [1, 3]}
{"timestamp": 2, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 3, "input_length": 700, "output_length": 1, "hash_ids": [1, 3]}
{"timestamp": 4, "input_length": 700, "output_length": 1, "hash_ids": [1, 3]}
)";

TEST(TraceBench, TinyTracePlan) {
  TraceFile f(kTinyTrace);
  ASSERT_OK_AND_ASSIGN(auto trace, ReadTrace(f.path(), 512));
  ASSERT_EQ(trace.size(), 5u);
  ASSERT_OK_AND_ASSIGN(TracePlan plan, BuildTracePlan(trace, 512));
  EXPECT_EQ(plan.keys.size(), 4u);  // A, B, B', B''
  EXPECT_EQ(plan.input_tokens, 4472u);
  EXPECT_EQ(plan.requests[0], (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(plan.requests[1], (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(plan.requests[2], (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(plan.requests[3], (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(plan.requests[4], (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(plan.tokens, (std::vector<uint32_t>{512, 512, 512, 188}));
  EXPECT_EQ(plan.parent, (std::vector<int32_t>{-1, 0, 0, 0}));
  EXPECT_EQ(BlockBytes(plan, 1.0, 1), (std::vector<uint64_t>{512, 512, 512, 188}));
  // 131,072 bytes/token scaled by 8192: 16 bytes per token.
  EXPECT_EQ(BlockBytes(plan, 131072, 8192), (std::vector<uint64_t>{8192, 8192, 8192, 3008}));
  EXPECT_EQ(BlockBytes(plan, 0.001, 1), (std::vector<uint64_t>{1, 1, 1, 1}));
}

TEST(TraceBench, TinyTraceLruSimulationExact) {
  TraceFile f(kTinyTrace);
  ASSERT_OK_AND_ASSIGN(auto trace, ReadTrace(f.path(), 512));
  ASSERT_OK_AND_ASSIGN(TracePlan plan, BuildTracePlan(trace, 512));
  const auto bytes = BlockBytes(plan, 1.0, 1);
  ReplayResult r = SimulateLru(plan, bytes, 1024);
  EXPECT_EQ(r.hit_tokens, 2236u);
  EXPECT_EQ(r.evictions, 3u);
  // Room for everything: every block seen before hits (r2..r5: 512, 1024, 512, 700).
  EXPECT_EQ(SimulateLru(plan, bytes, 1 << 20).hit_tokens, 2748u);
  // Room for less than one block: nothing is cached.
  EXPECT_EQ(SimulateLru(plan, bytes, 100).hit_tokens, 0u);
}

TEST(TraceBench, TinyTraceStoreReplayExact) {
  TraceFile f(kTinyTrace);
  ASSERT_OK_AND_ASSIGN(auto trace, ReadTrace(f.path(), 512));
  ASSERT_OK_AND_ASSIGN(TracePlan plan, BuildTracePlan(trace, 512));
  const auto bytes = BlockBytes(plan, 1.0, 1);
  for (auto policy : {store::EvictionPolicy::kLfuDecay, store::EvictionPolicy::kLru}) {
    SCOPED_TRACE(static_cast<int>(policy));
    store::StoreOptions so;  // T0 only, T1 and T2 off
    so.memory_budget_bytes = 1024;
    so.eviction = policy;
    ASSERT_OK_AND_ASSIGN(ReplayResult r, ReplayStore(plan, bytes, so));
    EXPECT_EQ(r.hit_tokens, 2236u);
    EXPECT_EQ(r.evictions, 3u);
    EXPECT_EQ(r.put_failures, 0u);
    so.memory_budget_bytes = 1 << 20;
    ASSERT_OK_AND_ASSIGN(r, ReplayStore(plan, bytes, so));
    EXPECT_EQ(r.hit_tokens, 2748u);
    EXPECT_EQ(r.evictions, 0u);
    so.memory_budget_bytes = 100;  // every Put is larger than the budget: refused
    ASSERT_OK_AND_ASSIGN(r, ReplayStore(plan, bytes, so));
    EXPECT_EQ(r.hit_tokens, 0u);
    EXPECT_EQ(r.put_failures, 5u);
  }
}

// With room for everything, the simulation and the Store both hit exactly the longest
// previously seen prefix of every request (a std::set model), on a random trace with
// shared heads, branching and partial last blocks.
TEST(TraceBench, UnboundedBudgetMatchesSeenPrefixModel) {
  std::mt19937_64 rng(20);
  std::string text;
  std::set<std::vector<uint32_t>> seen;  // (id prefix..., last block's tokens)
  uint64_t expect_hits = 0;
  for (int r = 0; r < 300; ++r) {
    const int n = 1 + static_cast<int>(rng() % 6);
    std::vector<uint32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(static_cast<uint32_t>(rng() % (i == 0 ? 2 : 4)));
    const uint64_t len = 512ull * (n - 1) + 1 + (rng() % 3 == 0 ? rng() % 511 : 511);
    text += R"({"input_length": )" + std::to_string(len) + R"(, "hash_ids": [)";
    for (int i = 0; i < n; ++i) text += (i ? ", " : "") + std::to_string(ids[i]);
    text += "]}\n";
    bool hit = true;
    for (int i = 0; i < n; ++i) {
      const uint32_t tok = i + 1 == n ? static_cast<uint32_t>(len - 512ull * (n - 1)) : 512;
      std::vector<uint32_t> k(ids.begin(), ids.begin() + i + 1);
      k.push_back(tok);
      if (hit && seen.count(k)) expect_hits += tok;
      else hit = false;
      seen.insert(k);
    }
  }
  TraceFile f(text);
  ASSERT_OK_AND_ASSIGN(auto trace, ReadTrace(f.path(), 512));
  ASSERT_OK_AND_ASSIGN(TracePlan plan, BuildTracePlan(trace, 512));
  const auto bytes = BlockBytes(plan, 3.0, 1);
  EXPECT_EQ(SimulateLru(plan, bytes, 1ull << 30).hit_tokens, expect_hits);
  store::StoreOptions so;
  so.memory_budget_bytes = 1ull << 30;
  ASSERT_OK_AND_ASSIGN(ReplayResult r, ReplayStore(plan, bytes, so));
  EXPECT_EQ(r.hit_tokens, expect_hits);
  EXPECT_GT(expect_hits, 0u);
}

TEST(TraceBench, MissingAndMalformedTraces) {
  auto missing = ReadTrace("/nonexistent/kvstash/trace.jsonl", 512);
  EXPECT_STATUS(missing, kNotFound);
  EXPECT_NE(missing.status().ToString().find("../shared/traces"), std::string::npos);
  TraceFile too_long(R"({"input_length": 1025, "hash_ids": [1, 2]})" "\n");
  EXPECT_STATUS(ReadTrace(too_long.path(), 512), kInvalidArgument);
  TraceFile too_short(R"({"input_length": 512, "hash_ids": [1, 2]})" "\n");
  EXPECT_STATUS(ReadTrace(too_short.path(), 512), kInvalidArgument);
  TraceFile not_json("{input_length\n");
  EXPECT_STATUS(ReadTrace(not_json.path(), 512), kInvalidArgument);
  TraceFile big_id(R"({"input_length": 10, "hash_ids": [4294967296]})" "\n");
  EXPECT_STATUS(ReadTrace(big_id.path(), 512), kInvalidArgument);
  // Nothing to replay is an error, not an all-zero row.
  TraceFile blank("\n  \n");
  EXPECT_STATUS(ReadTrace(blank.path(), 512), kInvalidArgument);
  EXPECT_STATUS(ReadTrace("/tmp", 512), kInvalidArgument);
}

// The whole run on the tiny trace with the committed codec results: one lru_sim row
// and one row per Store policy for every codec and budget; raw at a two-block budget
// reproduces the hand-derived numbers.
TEST(TraceBench, RunOnTinyTraceWithCommittedFigures) {
  TraceFile f(kTinyTrace);
  TraceBenchOptions o;
  o.traces = {f.path()};
  o.codecs = {"raw", "spec", "dckv-r24"};
  o.budgets = {0.5};  // distinct raw blocks: 3 full + 188/512 -> half is ~1.7 blocks
  ASSERT_OK_AND_ASSIGN(TraceBenchResult res, RunTraceBench(o));
  ASSERT_EQ(res.rows.size(), 9u);
  for (const auto& r : res.rows) {
    EXPECT_EQ(r.input_tokens, 4472u);
    EXPECT_EQ(r.requests, 5u);
  }
  // Compression never lowers the simulation's hit rate at a fixed budget here.
  EXPECT_LE(res.rows[0].hit_tokens, res.rows[3].hit_tokens);
  EXPECT_LE(res.rows[3].hit_tokens, res.rows[6].hit_tokens);
  // dckv-r24 (~23x smaller) fits everything: every reuse hits.
  EXPECT_EQ(res.rows[6].hit_tokens, 2748u);
  EXPECT_EQ(res.rows[7].hit_tokens, 2748u);
  TraceBenchOptions bad = o;
  bad.codecs = {"nope"};
  EXPECT_STATUS(RunTraceBench(bad), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::bench
