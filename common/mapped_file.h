// MappedFile: a read-only, whole-file memory map (POSIX mmap), RAII.
//
// Model loaders parse headers and read tensor bytes straight from the map; pages
// are faulted in on demand and released on destruction. An empty file maps to an
// empty span.
//
// Errors: Open returns IOError (with errno text) when the file cannot be opened,
// stat'ed or mapped. Thread-safety: immutable after Open; concurrent reads are safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstash/result.h"

namespace kvstash {

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvstash
