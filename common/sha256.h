// SHA-256 (FIPS 180-4, OpenSSL's EVP implementation) of bytes and of files: model
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

#include "common/result.h"

namespace kvstash {

using Digest256 = std::array<uint8_t, 32>;

// SHA-256 of `data`. Returns all zeros only if OpenSSL cannot allocate (no real input
// hashes to zeros).
Digest256 Sha256(std::span<const uint8_t> data);

// SHA-256 of the whole file at `path`, read in 1 MiB blocks.
Result<Digest256> Sha256File(const std::string& path);

}  // namespace kvstash
