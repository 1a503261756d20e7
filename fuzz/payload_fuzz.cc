// Fuzzes the stored-record parsers (kvstash/payload_format.h): chunk payloads and
// recurrent-state records. Any input must give a Status, never a crash, leak or UB;
// whatever parses must re-encode to the same bytes, and bind to a key (format version 2)
// and parse back bound to it with the same body.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "kvstash/payload_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  if (auto p = kvstash::ParsePayload(in); p.ok()) {
    auto again = kvstash::BuildPayload(p->header, p->body);
    if (!again.ok() || again->size() != size ||
        !std::equal(again->begin(), again->end(), data)) {
      std::abort();  // a payload we accept must be exactly what we would write
    }
    kvstash::StoredKey key{};
    std::copy_n(data, std::min(size, key.size()), key.begin());
    auto bound = kvstash::BindPayloadToKey(in, key);
    if (!p->header.chunk_key || *p->header.chunk_key == key) {
      if (!bound.ok()) std::abort();
      auto q = kvstash::ParsePayload(*bound);
      if (!q.ok() || q->header.chunk_key != key || !kvstash::CheckPayloadKey(q->header, key).ok() ||
          !std::equal(q->body.begin(), q->body.end(), p->body.begin(), p->body.end())) {
        std::abort();  // binding keeps the body and the parse
      }
    } else if (bound.ok()) {
      std::abort();  // a payload bound to another key is never rebound
    }
  }
  (void)kvstash::ParsePayloadHeader(in);
  if (auto s = kvstash::DecodeStateRecord(in); s.ok()) {
    auto again = kvstash::EncodeStateRecord(s->state, s->model_fingerprint);
    if (!again.ok() || again->size() != size ||
        !std::equal(again->begin(), again->end(), data)) {
      std::abort();
    }
  }
  return 0;
}
