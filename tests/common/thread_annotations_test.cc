// The annotated mutexes of common/thread_annotations.h behave as what they wrap: the
// scoped locks hold and release, Unlock/Lock inside a scope, adopt after TryLock, a
// condition variable waits on MutexLock::native(), readers share and writers exclude.
// (That clang reports a misuse is scripts/thread_safety.sh --self-test.)
#include "common/thread_annotations.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>

namespace kvstash {
namespace {

class Counter {
 public:
  void Add() {
    MutexLock lock(mu_);
    AddLocked();
  }
  int Get() {
    MutexLock lock(mu_);
    return n_;
  }
  Mutex& mu() KVSTASH_RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  void AddLocked() KVSTASH_REQUIRES(mu_) { ++n_; }
  Mutex mu_;
  int n_ KVSTASH_GUARDED_BY(mu_) = 0;
};

TEST(ThreadAnnotationsTest, MutexLockSerialisesWriters) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) c.Add();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Get(), 40000);
}

TEST(ThreadAnnotationsTest, TryLockAndAdopt) {
  Counter c;
  {
    MutexLock held(c.mu());
    std::thread other([&c] { EXPECT_FALSE(c.mu().TryLock()); });
    other.join();
  }
  if (c.mu().TryLock()) {
    MutexLock adopted(c.mu(), std::adopt_lock);  // releases it at the end of the scope
  } else {
    FAIL() << "TryLock of a free mutex failed";
  }
  std::thread other([&c] {
    if (c.mu().TryLock()) {
      c.mu().Unlock();
    } else {
      ADD_FAILURE() << "the adopted lock was not released";
    }
  });
  other.join();
}

TEST(ThreadAnnotationsTest, UnlockAndRelockInsideTheScope) {
  Counter c;
  MutexLock lock(c.mu());
  lock.Unlock();
  c.Add();  // would deadlock if still held
  lock.Lock();
  std::thread other([&c] { EXPECT_FALSE(c.mu().TryLock()); });
  other.join();
}

TEST(ThreadAnnotationsTest, ConditionVariableWaitsOnNative) {
  Mutex mu;
  std::condition_variable cv;
  bool ready = false;  // guarded by mu (a local: annotations are for fields)
  std::thread producer([&] {
    MutexLock lock(mu);
    ready = true;
    cv.notify_all();
  });
  {
    MutexLock lock(mu);
    cv.wait(lock.native(), [&] { return ready; });
    EXPECT_TRUE(ready);
  }
  producer.join();
}

TEST(ThreadAnnotationsTest, ReadersShareWritersExclude) {
  SharedMutex mu;
  std::atomic<int> readers_in{0};
  std::atomic<bool> both_inside{false};
  auto reader = [&] {
    ReaderLock lock(mu);
    ++readers_in;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (readers_in.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    if (readers_in.load() == 2) both_inside = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    --readers_in;
  };
  std::thread a(reader), b(reader);
  a.join();
  b.join();
  EXPECT_TRUE(both_inside.load());  // two readers held it at once

  WriterLock w(mu);
  std::thread other([&] {
    // A reader cannot get in while the writer holds it: it gets in after Unlock.
    ReaderLock lock(mu);
    EXPECT_EQ(readers_in.load(), -1);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  readers_in = -1;
  w.Unlock();
  other.join();
}

}  // namespace
}  // namespace kvstash
