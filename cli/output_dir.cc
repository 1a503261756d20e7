#include "cli/output_dir.h"

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

}  // namespace kvstash::cli
