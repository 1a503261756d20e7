// RunOnWorkers: every worker index runs exactly once, on its own thread when the OS
// grants one and on the calling thread when it refuses (FailNextThreadSpawnsForTesting
// stands in for EAGAIN from pthread_create), and a refusal never aborts the process.
#include "common/worker_threads.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

namespace kvstash {
namespace {

struct Record {
  std::mutex mu;
  std::vector<int> calls;                  // calls per worker index
  std::vector<std::thread::id> thread_of;  // thread that ran each index
  explicit Record(uint32_t n) : calls(n, 0), thread_of(n) {}
  void Run(uint32_t w) {
    std::lock_guard lock(mu);
    ++calls[w];
    thread_of[w] = std::this_thread::get_id();
  }
};

TEST(RunOnWorkers, EveryIndexOnceOnItsOwnThread) {
  Record r(4);
  RunOnWorkers(4, [&](uint32_t w) { r.Run(w); });
  EXPECT_EQ(r.calls, std::vector<int>({1, 1, 1, 1}));
  EXPECT_EQ(r.thread_of[0], std::this_thread::get_id());
  for (uint32_t w = 1; w < 4; ++w) EXPECT_NE(r.thread_of[w], std::this_thread::get_id()) << w;
}

TEST(RunOnWorkers, ZeroAndOneWorkersRunOnTheCaller) {
  int calls = 0;
  RunOnWorkers(0, [&](uint32_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  std::thread::id ran_on;
  RunOnWorkers(1, [&](uint32_t w) {
    EXPECT_EQ(w, 0u);
    ++calls;
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

// The OS refuses the third thread (worker 3): workers 1 and 2 keep their threads and
// are joined (a std::vector<std::thread> destroyed while joinable would std::terminate),
// worker 3 runs on the caller, each index exactly once, one failure counted.
TEST(RunOnWorkers, RefusedThreadRunsItsShareOnTheCaller) {
  const uint64_t failures = ThreadSpawnFailures();
  Record r(5);
  RefuseThreadSpawnsForTesting(2, 1);
  RunOnWorkers(5, [&](uint32_t w) { r.Run(w); });
  EXPECT_EQ(r.calls, std::vector<int>({1, 1, 1, 1, 1}));
  const auto me = std::this_thread::get_id();
  EXPECT_EQ(r.thread_of[0], me);
  EXPECT_NE(r.thread_of[1], me);
  EXPECT_NE(r.thread_of[2], me);
  EXPECT_NE(r.thread_of[1], r.thread_of[2]);
  EXPECT_EQ(r.thread_of[3], me);
  EXPECT_EQ(r.thread_of[4], me);  // no further spawn is tried after a refusal
  EXPECT_EQ(ThreadSpawnFailures(), failures + 1);

  // The plan is spent: the next call gets its threads again.
  Record again(3);
  RunOnWorkers(3, [&](uint32_t w) { again.Run(w); });
  EXPECT_EQ(again.calls, std::vector<int>({1, 1, 1}));
  EXPECT_NE(again.thread_of[1], me);
  EXPECT_NE(again.thread_of[2], me);
  EXPECT_EQ(ThreadSpawnFailures(), failures + 1);
}

// Every thread refused (the very first spawn fails): all the work runs on the caller.
TEST(RunOnWorkers, NoThreadAtAllStillRunsEveryWorker) {
  const uint64_t failures = ThreadSpawnFailures();
  Record r(4);
  RefuseThreadSpawnsForTesting(0, 1);
  RunOnWorkers(4, [&](uint32_t w) { r.Run(w); });
  EXPECT_EQ(r.calls, std::vector<int>({1, 1, 1, 1}));
  for (uint32_t w = 0; w < 4; ++w) EXPECT_EQ(r.thread_of[w], std::this_thread::get_id()) << w;
  EXPECT_EQ(ThreadSpawnFailures(), failures + 1);
}

}  // namespace
}  // namespace kvstash
