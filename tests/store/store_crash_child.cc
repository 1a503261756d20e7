// Crash-test child: opens the store at argv[1] and Puts chains forever, seed by seed
// starting at argv[2]; after each Put returns Ok it writes "<seed>\n" to stdout (the
// acknowledgement the parent relies on). Every 5th chain is then pinned and
// acknowledged as "P<seed>\n". The parent SIGKILLs it at a random moment.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "store/store.h"
#include "tests/store/store_test_util.h"

using namespace kvstash;
using namespace kvstash::store;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: store_crash_child DIR FIRST_SEED\n");
    return 2;
  }
  StoreOptions o;
  o.path = argv[1];
  o.memory_budget_bytes = 1 << 20;
  o.blob_min_bytes = 4096;  // half the chunks go to blob files
  auto store = Store::Open(o);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  const Digest256 ns = testing::TestNamespace("crash");
  for (uint64_t seed = std::strtoull(argv[2], nullptr, 10);; ++seed) {
    const testing::Chain c = testing::MakeChain(ns, seed, 1 + seed % 4, 500 + (seed % 3) * 2500,
                                                256, seed % 2 == 0);
    Status s = (*store)->Put(c.Puts());
    if (!s.ok()) {
      std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
      return 1;
    }
    std::string ack = std::to_string(seed) + "\n";
    if (write(1, ack.data(), ack.size()) != static_cast<ssize_t>(ack.size())) return 1;
    if (seed % 5 == 0) {
      if (!(*store)->Pin(c.stored()).ok()) return 1;
      ack = "P" + ack;
      if (write(1, ack.data(), ack.size()) != static_cast<ssize_t>(ack.size())) return 1;
    }
  }
}
