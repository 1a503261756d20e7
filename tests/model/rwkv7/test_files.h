// Small file helpers for the hybrid tests.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "model/rwkv7/rwkv_file.h"
#include "tests/support/test_util.h"

namespace kvstash::testing {

// Committed synthetic RWKV-7 fixture (tests/model/rwkv7/data/make_synthetic_rwkv7.py).
inline std::string SyntheticModelPath() {
  return SourceDir() + "/tests/model/rwkv7/data/tiny-synthetic-rwkv7.bin";
}
inline std::string SyntheticLogitsPath() {
  return SourceDir() + "/tests/model/rwkv7/data/synthetic-rwkv7-logits.bin";
}
// Tokens whose per-token logits synthetic-rwkv7-logits.bin holds.
inline const std::vector<uint32_t>& SyntheticTokens() {
  static const std::vector<uint32_t> kTokens = {1, 5, 9, 3, 15, 0, 7, 7, 2, 11, 4, 4, 13};
  return kTokens;
}

// A little-endian fp32 file as floats (empty if unreadable or not a multiple of 4).
inline std::vector<float> ReadFloats(const std::string& path) {
  auto bytes = ReadFileBytes(path);
  if (!bytes.ok() || bytes->size() % 4 != 0) return {};
  std::vector<float> out(bytes->size() / 4);
  std::memcpy(out.data(), bytes->data(), bytes->size());
  return out;
}

}  // namespace kvstash::testing
