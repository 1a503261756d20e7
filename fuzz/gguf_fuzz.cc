// Fuzzes the GGUF parser (model/formats/gguf_reader.h) and dequantisation of every tensor
// it accepts: malformed files must give a Status (Corruption / NotSupported), never
// a crash, an out-of-bounds read or an unbounded allocation.
#include <cstddef>
#include <cstdint>

#include "model/formats/gguf_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = kvstash::model::GgufFile::Parse(std::span<const uint8_t>(data, size));
  if (!f.ok()) return 0;
  for (const auto& t : (*f)->tensors()) {
    if (t.elements > (1u << 20)) continue;  // keep each input cheap
    (void)(*f)->ReadF32(t.name);
  }
  for (const auto& [key, v] : (*f)->metadata()) {
    (void)(*f)->GetU32(key);
    (void)(*f)->GetString(key);
  }
  return 0;
}
