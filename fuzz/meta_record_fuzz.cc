// Fuzzes the store's per-chunk metadata parser (store/meta_record.h): the value of T1's
// `meta` column family read back from disk at start-up and on every read, and field
// "m" of a chunk's hash in the shared T2 (Redis), which other nodes write. Any input
// must give a Status, never a crash or UB; a record that parses must encode back to
// exactly its bytes (the 88-byte layout is canonical: reserved bits are refused).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "store/meta_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = kvstash::store::DecodeMetaRecord(std::span<const uint8_t>(data, size));
  if (!r.ok()) return 0;
  const std::string again = kvstash::store::EncodeMetaRecord(*r);
  if (again.size() != size || !std::equal(again.begin(), again.end(), reinterpret_cast<const char*>(data))) {
    std::abort();
  }
  return 0;
}
