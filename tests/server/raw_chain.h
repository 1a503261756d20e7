// A chain of raw chunks stored through the client, for tests that need traffic of a
// known hit rate: chunk i (1-based) has key Key(i), parent Key(i - 1), route Key(1)
// and a raw payload of `tokens` tokens (seed i, tests/server/test_payloads.h).
#pragma once

#include <vector>

#include "kvstash/client.h"
#include "tests/server/test_payloads.h"

namespace kvstash::server::testing {

// PUTs chunks 1..n. Errors: the client's.
inline Status PutRawChain(Client& c, uint32_t n, uint32_t tokens) {
  for (uint32_t i = 1; i <= n; ++i) {
    kvstash::PutChunk p;
    p.route = Key(1);
    p.key = Key(i);
    if (i > 1) p.parent = Key(i - 1);
    p.payload = RawPayload(tokens, i);
    if (Status s = c.Put(p); !s.ok()) return s;
  }
  return Status::Ok();
}

// The LOOKUP chain of chunks 1..n, `tokens` tokens each.
inline std::vector<ChunkRef> RawChainRefs(uint32_t n, uint32_t tokens) {
  std::vector<ChunkRef> chain;
  for (uint32_t i = 1; i <= n; ++i) chain.push_back({Key(i), tokens});
  return chain;
}

}  // namespace kvstash::server::testing
