#include "cli/bench/json_output.h"

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

}  // namespace kvstash::cli
