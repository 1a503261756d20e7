#include "cli/bench/json_output.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kvstash::cli {

bool WriteJsonFile(const std::string& command, const std::string& path, const nlohmann::json& j, int indent) {
  std::ofstream f(path);
  f << j.dump(indent) << "\n";
  if (!f) {
    std::cerr << "kvstash-" << command << ": cannot write " << path << "\n";
    return false;
  }
  return true;
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
        if (fs::is_symlink(fs::symlink_status(path, ec))) return "cannot write " + path + ": a dangling symbolic link";
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
