// Thread-safety annotations and the annotated mutexes every kvstash library uses.
//
// Contract: shared mutable state is guarded by a kvstash::Mutex or kvstash::SharedMutex
// and every field it guards is declared KVSTASH_GUARDED_BY(mu_); a private helper that
// runs with the lock held says so with KVSTASH_REQUIRES(mu_) (or REQUIRES_SHARED), one
// that takes the lock itself with KVSTASH_EXCLUDES(mu_). clang checks these at compile
// time (-Wthread-safety; scripts/thread_safety.sh runs it over the tree in CI, see
// docs/development.md); under gcc every macro is empty and the wrappers are plain
// std::mutex / std::shared_mutex with no extra cost.
//
// The design follows the mutex.h example of clang's ThreadSafetyAnalysis documentation
// (clang.llvm.org/docs/ThreadSafetyAnalysis.html). Surprises:
// - The analysis is per function and does not look into lambdas: a lambda that reads
//   guarded state needs its own KVSTASH_REQUIRES(...) (its callers are then checked).
// - It does not follow std::unique_lock or std::condition_variable (libstdc++ is not
//   annotated). Waiting is done on MutexLock::native(): the mutex counts as held
//   across the wait, which is what the code after the wait may assume.
// - KVSTASH_NO_THREAD_SAFETY_ANALYSIS turns the check off for one function; every use
//   carries a comment saying why it is safe.
//
// Thread-safety: Mutex and SharedMutex are what they wrap; the scoped locks belong to
// the thread that made them.
#pragma once

#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define KVSTASH_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KVSTASH_THREAD_ANNOTATION_(x)  // gcc: no thread-safety analysis
#endif

// A type that is a capability (a mutex); `name` appears in the warnings.
#define KVSTASH_CAPABILITY(name) KVSTASH_THREAD_ANNOTATION_(capability(name))
// An RAII type that acquires a capability in its constructor and releases it in its
// destructor.
#define KVSTASH_SCOPED_CAPABILITY KVSTASH_THREAD_ANNOTATION_(scoped_lockable)
// A field read or written only with `mu` held (shared for reads of a SharedMutex).
#define KVSTASH_GUARDED_BY(mu) KVSTASH_THREAD_ANNOTATION_(guarded_by(mu))
// A pointer field whose pointee is read or written only with `mu` held.
#define KVSTASH_PT_GUARDED_BY(mu) KVSTASH_THREAD_ANNOTATION_(pt_guarded_by(mu))
// Lock order: this capability is taken before / after those (checked by
// -Wthread-safety-beta, which scripts/thread_safety.sh turns on).
#define KVSTASH_ACQUIRED_BEFORE(...) KVSTASH_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define KVSTASH_ACQUIRED_AFTER(...) KVSTASH_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
// A function called with these capabilities held exclusively / at least shared.
#define KVSTASH_REQUIRES(...) KVSTASH_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define KVSTASH_REQUIRES_SHARED(...) \
  KVSTASH_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
// A function that acquires / releases these capabilities (none named: `this`, or the
// capability a scoped lock holds).
#define KVSTASH_ACQUIRE(...) KVSTASH_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define KVSTASH_ACQUIRE_SHARED(...) \
  KVSTASH_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define KVSTASH_RELEASE(...) KVSTASH_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define KVSTASH_RELEASE_SHARED(...) \
  KVSTASH_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
// A function that acquires the capability when it returns `result` (true).
#define KVSTASH_TRY_ACQUIRE(...) KVSTASH_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// A function that must be called without these capabilities (it takes them itself).
#define KVSTASH_EXCLUDES(...) KVSTASH_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// A function that returns a reference to this capability.
#define KVSTASH_RETURN_CAPABILITY(x) KVSTASH_THREAD_ANNOTATION_(lock_returned(x))
// Turns the analysis off for one function. REQUIRES a comment at each use saying why
// the function is safe.
#define KVSTASH_NO_THREAD_SAFETY_ANALYSIS KVSTASH_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace kvstash {

class MutexLock;

// std::mutex, as a capability. Prefer MutexLock to Lock/Unlock.
class KVSTASH_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() KVSTASH_ACQUIRE() { mu_.lock(); }
  void Unlock() KVSTASH_RELEASE() { mu_.unlock(); }
  // True when the mutex was free and is now held by the caller.
  bool TryLock() KVSTASH_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// std::shared_mutex, as a capability: exclusive for writers, shared for readers.
// Prefer WriterLock / ReaderLock.
class KVSTASH_CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() KVSTASH_ACQUIRE() { mu_.lock(); }
  void Unlock() KVSTASH_RELEASE() { mu_.unlock(); }
  void LockShared() KVSTASH_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() KVSTASH_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex for its scope. Unlock()/Lock() release and retake it inside the scope;
// native() is the std::unique_lock a std::condition_variable waits on.
class KVSTASH_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KVSTASH_ACQUIRE(mu) : lock_(mu.mu_) {}
  // Takes over a Mutex the caller already holds (after a successful TryLock).
  MutexLock(Mutex& mu, std::adopt_lock_t) KVSTASH_REQUIRES(mu) : lock_(mu.mu_, std::adopt_lock) {}
  ~MutexLock() KVSTASH_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // REQUIRES: held (Unlock) / not held (Lock) by this MutexLock.
  void Unlock() KVSTASH_RELEASE() { lock_.unlock(); }
  void Lock() KVSTASH_ACQUIRE() { lock_.lock(); }

  // For cv.wait(lock.native(), ...): the analysis counts the mutex as held throughout.
  // A predicate lambda that reads guarded fields is declared KVSTASH_REQUIRES(mu).
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// Holds a SharedMutex exclusively for its scope; Unlock() releases it early.
class KVSTASH_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) KVSTASH_ACQUIRE(mu) : mu_(&mu) { mu_->Lock(); }
  ~WriterLock() KVSTASH_RELEASE() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

  // REQUIRES: still held by this WriterLock.
  void Unlock() KVSTASH_RELEASE() {
    mu_->Unlock();
    mu_ = nullptr;
  }

 private:
  SharedMutex* mu_;
};

// Holds a SharedMutex shared for its scope.
class KVSTASH_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) KVSTASH_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() KVSTASH_RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace kvstash
