// Crash safety: a child process doing Puts (store_crash_child) is SIGKILLed at random
// moments, >= 100 rounds. After each kill the store is reopened and: every Put the
// child acknowledged is present with exact bytes, the Put in flight is all-or-nothing,
// every visible entry verifies, and acknowledged pins hold.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>

#include "store/store.h"
#include "tests/store/store_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::store::testing {
namespace {

Chain ChildChain(uint64_t seed) {
  // Must match store_crash_child.cc.
  return MakeChain(TestNamespace("crash"), seed, 1 + seed % 4, 500 + (seed % 3) * 2500, 256,
                   seed % 2 == 0);
}

// Runs the child from `first_seed` for `ms` milliseconds after its first ack (or until
// `ms` passes without one), SIGKILLs it, and returns everything it wrote.
std::string RunAndKill(const std::string& dir, uint64_t first_seed, int ms) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    const std::string seed = std::to_string(first_seed);
    execl(KVSTASH_STORE_CRASH_CHILD, "store_crash_child", dir.c_str(), seed.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  const auto start = std::chrono::steady_clock::now();
  auto kill_at = start + std::chrono::milliseconds(2000);  // open takes a while
  bool acked = false;
  char buf[4096];
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= kill_at) break;
    pollfd p{fds[0], POLLIN, 0};
    const int wait =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - now).count());
    if (poll(&p, 1, std::max(wait, 1)) <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;  // the child died by itself (a test failure shows below)
    out.append(buf, static_cast<size_t>(n));
    if (!acked) {
      acked = true;
      kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    }
  }
  kill(pid, SIGKILL);
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

TEST(StoreCrash, KilledWriterLeavesWholeEntriesAndEveryAcknowledgedPut) {
  // 10 databases of 10 rounds each keep every reopen (and VerifyAll) small.
  constexpr int kRoundsPerDb = 10;
  std::mt19937_64 rng(20261130);
  std::unique_ptr<TempDir> dir_holder;
  std::set<uint64_t> acked, pinned, maybe_pinned;  // maybe: Pin in flight at a kill
  uint64_t next_seed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int rounds = 0;
  uint64_t acked_total = 0, in_flight_present = 0, in_flight_absent = 0;
  for (; rounds < 100 && std::chrono::steady_clock::now() < deadline; ++rounds) {
    if (rounds % kRoundsPerDb == 0) {
      dir_holder = std::make_unique<TempDir>();
      acked.clear();
      pinned.clear();
      maybe_pinned.clear();
    }
    const TempDir& dir = *dir_holder;
    const std::string out = RunAndKill(dir.path(), next_seed, static_cast<int>(rng() % 25));
    uint64_t last = next_seed;
    bool any = false;
    size_t b = 0;
    while (b < out.size()) {
      const size_t e = out.find('\n', b);
      if (e == std::string::npos) break;  // a torn last line is not an acknowledgement
      const std::string line = out.substr(b, e - b);
      b = e + 1;
      if (!line.empty() && line[0] == 'P') {
        pinned.insert(std::stoull(line.substr(1)));
      } else {
        const uint64_t seed = std::stoull(line);
        acked.insert(seed);
        ++acked_total;
        last = seed;
        any = true;
      }
    }
    const uint64_t in_flight = any ? last + 1 : next_seed;
    if (any && last % 5 == 0 && !pinned.count(last)) maybe_pinned.insert(last);

    StoreOptions o;
    o.path = dir.path();
    o.memory_budget_bytes = 0;
    auto opened = Store::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto& store = *opened;
    for (uint64_t seed = any ? last : next_seed; seed <= in_flight; ++seed) {
      const Chain c = ChildChain(seed);
      ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
      size_t found = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!got[i].found) continue;
        ++found;
        ASSERT_EQ(std::vector<uint8_t>(got[i].payload_bytes().begin(), got[i].payload_bytes().end()),
                  c.payloads[i]);
        ASSERT_EQ(std::vector<uint8_t>(got[i].state_bytes().begin(), got[i].state_bytes().end()),
                  c.states[i]);
      }
      if (acked.count(seed)) {
        ASSERT_EQ(found, c.keys.size()) << "acknowledged Put " << seed << " lost";
      } else {
        ASSERT_TRUE(found == 0 || found == c.keys.size())
            << "Put " << seed << " is partial: " << found << " of " << c.keys.size();
        (found ? in_flight_present : in_flight_absent)++;
      }
    }
    // Every acknowledged Put of every round so far is still there.
    for (uint64_t seed : acked) {
      const Chain c = ChildChain(seed);
      ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(c.stored(), false));
      ASSERT_EQ(r.keys.size(), c.keys.size()) << "acknowledged Put " << seed << " lost";
    }
    ASSERT_OK_AND_ASSIGN(VerifyReport v, store->VerifyAll());
    ASSERT_EQ(v.dropped, 0u);
    ASSERT_EQ(v.verified, v.entries);
    uint64_t pinned_chunks = 0, maybe_chunks = 0;
    for (uint64_t seed : pinned) pinned_chunks += ChildChain(seed).keys.size();
    for (uint64_t seed : maybe_pinned) maybe_chunks += ChildChain(seed).keys.size();
    const StoreStats s = store->Stats();
    ASSERT_GE(s.pinned_entries, pinned_chunks);
    ASSERT_LE(s.pinned_entries, pinned_chunks + maybe_chunks);  // in-flight pins may land
    next_seed = in_flight + 1;
  }
  EXPECT_GE(rounds, 100) << "the time bound cut the rounds short";
  std::cout << "crash rounds " << rounds << ", acknowledged Puts " << acked_total
            << ", in-flight Puts found whole " << in_flight_present << ", absent "
            << in_flight_absent << "\n";
}

}  // namespace
}  // namespace kvstash::store::testing
