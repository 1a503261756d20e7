#include "common/worker_threads.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace kvstash {
namespace {

std::atomic<uint64_t> g_spawn_failures{0};

// RefuseThreadSpawnsForTesting's plan: spawns left to allow, then to refuse.
struct SpawnPlan {
  Mutex mu;
  int allow KVSTASH_GUARDED_BY(mu) = 0;
  int refuse KVSTASH_GUARDED_BY(mu) = 0;
  std::atomic<bool> armed{false};  // refuse > 0: the only cost on the normal path
};
SpawnPlan& Plan() {
  static SpawnPlan plan;
  return plan;
}

// Whether the test seam refuses this spawn (consumes one step of its plan).
bool RefusedForTesting() {
  SpawnPlan& p = Plan();
  if (!p.armed.load(std::memory_order_relaxed)) return false;
  MutexLock lock(p.mu);
  if (p.allow > 0) {
    --p.allow;
    return false;
  }
  if (p.refuse == 0) return false;
  p.armed.store(--p.refuse > 0);
  return true;
}

}  // namespace

std::thread StartThread(std::function<void()> fn) {
  if (RefusedForTesting()) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "thread creation refused (RefuseThreadSpawnsForTesting)");
  }
  return std::thread(std::move(fn));
}

void RunOnWorkers(uint32_t workers, const std::function<void(uint32_t)>& run) {
  if (workers == 0) return;
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);  // push_back below never reallocates: no bad_alloc with threads running
  uint32_t started = 1;
  for (; started < workers; ++started) {
    try {
      pool.push_back(StartThread([&run, w = started] { run(w); }));
    } catch (const std::system_error& e) {
      if (g_spawn_failures.fetch_add(1) == 0) {
        KVSTASH_LOG_WARN("could not start a worker thread ({}); running {} of {} workers on the calling thread",
                         e.what(), workers - started, workers);
      }
      break;
    }
  }
  run(0);
  for (uint32_t w = started; w < workers; ++w) run(w);
  for (auto& t : pool) t.join();
}

uint64_t ThreadSpawnFailures() { return g_spawn_failures.load(); }

void RefuseThreadSpawnsForTesting(int allow, int refuse) {
  SpawnPlan& p = Plan();
  MutexLock lock(p.mu);
  p.allow = std::max(allow, 0);
  p.refuse = std::max(refuse, 0);
  p.armed.store(p.refuse > 0);
}

}  // namespace kvstash
