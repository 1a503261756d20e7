// Fuzzes the stored-record parsers (common/payload_format.h): chunk payloads and
// recurrent-state records. Any input must give a Status, never a crash, leak or UB;
// whatever parses must re-encode to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "common/payload_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  if (auto p = kvstash::ParsePayload(in); p.ok()) {
    auto again = kvstash::BuildPayload(p->header, p->body);
    if (!again.ok() || again->size() != size ||
        !std::equal(again->begin(), again->end(), data)) {
      std::abort();  // a payload we accept must be exactly what we would write
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
