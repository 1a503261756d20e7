// Fuzzes the dckv artifact parser (codec/dckv/dckv_artifact.h). The input is taken as
// the artifact without its XXH3-64 trailer, which the fuzzer appends, so that the
// parser's field checks (shapes, group cover, steps, table section, table indices)
// are reached instead of stopping at the checksum. Any input must give a Status,
// never a crash, an out-of-bounds read or an unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_codec.h"
#include "common/byte_io.h"
#include "common/checksum.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  kvstash::ByteWriter(&bytes).U64(kvstash::Xxh3_64(std::span<const uint8_t>(data, size)));
  auto a = kvstash::dckv::DckvArtifact::Parse(bytes);
  if (!a.ok()) return 0;
  (void)a->Serialize();
  (void)kvstash::dckv::DckvCodec::Create(std::move(*a));
  return 0;
}
