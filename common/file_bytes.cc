#include "common/file_bytes.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace kvstash {

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return Status::InvalidArgument(path + " is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) return Status::IOError("cannot read " + path);
  return bytes;
}

Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) return Status::IOError("cannot write " + path);
  return Status::Ok();
}

}  // namespace kvstash
