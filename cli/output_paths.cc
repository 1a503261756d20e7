#include "cli/output_paths.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace kvstash::cli {

CLI::Validator WritableOutputDir() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        namespace fs = std::filesystem;
        std::error_code ec;
        fs::path dir = fs::absolute(value, ec);
        if (ec) return "cannot resolve " + value + " (" + ec.message() + ")";
        if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) return value + " is not a folder";
        // The folder, or the nearest ancestor that exists: the one a write or mkdir needs.
        while (!fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir)
          dir = dir.parent_path();
        if (!fs::is_directory(dir, ec)) return dir.string() + " is not a folder";
        std::string probe = (dir / ".kvstash-write-check-XXXXXX").string();
        const int fd = mkstemp(probe.data());
        if (fd < 0) return "cannot write into " + dir.string() + " (" + std::strerror(errno) + ")";
        close(fd);
        unlink(probe.c_str());
        return "";
      },
      "DIR", "writable output folder");
}

const CLI::Validator& WritableOutputFile() {
  static const CLI::Validator v(
      [](std::string& path) -> std::string {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (path.empty()) return "FILE must not be empty";
        const fs::file_status st = fs::status(path, ec);
        if (fs::is_directory(st)) return path + " is a folder, not a file";
        if (fs::exists(st)) {  // written in place: it must be writable itself
          if (::access(path.c_str(), W_OK) != 0) return "cannot write " + path + ": " + std::strerror(errno);
          return "";
        }
        if (fs::is_symlink(fs::symlink_status(path, ec)))
          return "cannot write " + path + ": a dangling symbolic link";
        const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
        const fs::file_status dst = fs::status(dir, ec);
        if (!fs::exists(dst)) return "cannot write " + path + ": folder " + dir.string() + " does not exist";
        if (!fs::is_directory(dst)) return "cannot write " + path + ": " + dir.string() + " is not a folder";
        if (::access(dir.c_str(), W_OK) != 0) {
          return "cannot write " + path + ": folder " + dir.string() + ": " + std::strerror(errno);
        }
        return "";
      },
      "FILE");
  return v;
}

}  // namespace kvstash::cli
