// Whole-file reads and writes of bytes (payload files, model files, fixtures).
//
// Errors: ReadFileBytes returns IOError when the file does not exist, cannot be opened
// or a read fails, and InvalidArgument when the path exists but is not a regular file
// (a folder, a device); WriteFileBytes returns IOError when the file cannot be written.
// Thread-safety: pure functions (the file system aside).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvstash/result.h"

namespace kvstash {

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path);
// Creates or truncates `path` and writes `bytes`.
Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace kvstash
