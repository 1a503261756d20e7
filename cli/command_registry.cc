#include "cli/command_registry.h"

namespace kvstash::cli {
namespace {
std::vector<CommandSpec>& Registry() {
  static std::vector<CommandSpec> r;
  return r;
}
}  // namespace

bool RegisterCommand(std::string path, std::string description, CommandConfigure configure) {
  Registry().push_back({std::move(path), std::move(description), std::move(configure)});
  return true;
}

const std::vector<CommandSpec>& RegisteredCommands() { return Registry(); }

}  // namespace kvstash::cli
