// Worker threads that survive the OS refusing a thread.
//
// RunOnWorkers: the one way kvstash fans a computation out over short-lived threads
// (through numerics/parallel_for.h: the spec and dckv codecs, the spec predictors, the
// int8 GEMMs, spec calibration).
// StartThread: how a long-lived thread is started (kvstash-server's I/O and worker
// threads), so that the same test seam reaches it; its caller handles the refusal.
//
// Contract: run(w) is called exactly once for every worker index w in [0, workers),
// and RunOnWorkers returns only after every call has returned. Worker 0 runs on the
// calling thread; workers 1 .. workers-1 each get a new std::thread. When the OS refuses
// a thread (std::thread throws std::system_error, e.g. EAGAIN when the process or the
// machine is out of threads or memory for stacks), no further threads are started and
// the workers that did not start run on the calling thread after worker 0, in index
// order. Results are therefore the same as with every thread (each index is run once,
// with its own index), only later; the process never aborts because a thread could not
// be created. Each refused thread is counted (ThreadSpawnFailures) and the first is
// logged as a warning.
//
// Thread-safety: RunOnWorkers is reentrant and may be called from any thread. run must
// be safe to call concurrently for distinct w and must not throw (an exception escaping
// a worker thread terminates the process, as for any std::thread).
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

namespace kvstash {

/// Calls run(w) for every w in [0, workers) as described above. workers 0 or 1 runs
/// everything on the calling thread (run(0) once when workers is 1, nothing when 0).
void RunOnWorkers(uint32_t workers, const std::function<void(uint32_t)>& run);

/// Starts a thread running fn. Throws std::system_error when the OS refuses it (or
/// RefuseThreadSpawnsForTesting does); the caller decides what a refusal means (it is
/// not counted in ThreadSpawnFailures). Thread-safe.
std::thread StartThread(std::function<void()> fn);

/// Number of threads RunOnWorkers could not start since the process began (all
/// callers together). Thread-safe.
uint64_t ThreadSpawnFailures();

/// Test seam (process-wide): of the next thread creations (RunOnWorkers, StartThread), the first
/// `allow` succeed and the `refuse` after them fail as if the OS had refused them
/// (std::system_error with EAGAIN); later ones succeed again. (0, 0) clears it.
/// Thread-safe; for tests only.
void RefuseThreadSpawnsForTesting(int allow, int refuse);

}  // namespace kvstash
