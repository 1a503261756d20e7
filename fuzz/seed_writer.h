// Seed files for fuzz targets whose valid inputs must be built by the codec under test
// (an encoded payload, a serialised artifact): such a target writes them from its
// LLVMFuzzerInitialize when KVSTASH_FUZZ_WRITE_SEEDS names a folder, e.g.
//   KVSTASH_FUZZ_WRITE_SEEDS=fuzz/seeds/spec_kv_fuzz build-fuzz/fuzz/spec_kv_fuzz -runs=0
// and fuzzing then starts from inputs that reach the deepest checks. The files are
// committed under fuzz/seeds/<target>/ (docs/development.md).
// Thread-safety: call from LLVMFuzzerInitialize only (one thread).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kvstash::fuzz {

// The folder named by KVSTASH_FUZZ_WRITE_SEEDS, or empty when unset.
inline std::string SeedFolder() {
  const char* dir = std::getenv("KVSTASH_FUZZ_WRITE_SEEDS");
  return dir == nullptr ? std::string() : std::string(dir);
}

// Writes `bytes` to <folder>/<name>; exits the process with status 1 (and a message)
// when the file cannot be written, so a seed run never silently writes nothing.
inline void WriteSeed(const std::string& folder, const std::string& name,
                      const std::vector<uint8_t>& bytes) {
  const std::string path = folder + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) {
    std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
    std::exit(1);
  }
  std::fprintf(stderr, "seed %s: %zu bytes\n", path.c_str(), bytes.size());
}

}  // namespace kvstash::fuzz
