// SHA-256 (FIPS 180-4, OpenSSL's EVP implementation) of bytes, of files and of streams
// of both: model
// fingerprints (the digest of a weights file), artifact digests, namespace digests.
//
// Errors: Sha256File returns NotFound when the file cannot be opened and IOError when
// a read fails; Internal if OpenSSL fails (allocation).
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "kvstash/result.h"

namespace kvstash {

using Digest256 = std::array<uint8_t, 32>;

// SHA-256 of `data`. Returns all zeros only if OpenSSL cannot allocate (no real input
// hashes to zeros).
Digest256 Sha256(std::span<const uint8_t> data);

// SHA-256 of the whole file at `path`, read in 1 MiB blocks.
Result<Digest256> Sha256File(const std::string& path);

// SHA-256 of a sequence of byte strings and files, fed in order (e.g. each weights
// file's name, a NUL, then its bytes). Errors stick: after a failed call every later
// call does nothing and Finish returns the first error.
// Thread-safety: one object per thread.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;

  void Update(std::span<const uint8_t> data);
  // Feeds the whole file at `path` (1 MiB reads). Errors: NotFound when it cannot be
  // opened, IOError when a read fails.
  Status UpdateFromFile(const std::string& path);
  // The digest of everything fed, or the first error. Call once.
  Result<Digest256> Finish();

 private:
  void* ctx_;  // EVP_MD_CTX*
  Status status_;
};

}  // namespace kvstash
