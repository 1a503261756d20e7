// Registry of `kvstash` subcommands.
//
// Each subcommand lives in its own file under cli/ and registers itself at
// static-initialisation time:
//
//   static const bool kRegistered = kvstash::cli::RegisterCommand(
//       "bench entropy", "Benchmark rANS coding on realistic symbol streams",
//       [](CLI::App* cmd) {
//         auto opts = std::make_shared<Options>();
//         cmd->add_option("--json", opts->json, "Write rows to FILE as JSON");
//         return [opts] { return RunBenchEntropy(*opts); };   // exit code
//       });
//
// The path's words create nested subcommands ("bench entropy" -> kvstash bench
// entropy). The configure function adds options and returns the action; the action's
// int is the process exit code. Files under cli/ are compiled into the
// executable itself (not a static library), so their registrations are never dropped.
//
// Thread-safety: registration happens before main(); not for use afterwards.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace kvstash::cli {

using CommandAction = std::function<int()>;
using CommandConfigure = std::function<CommandAction(CLI::App* cmd)>;

struct CommandSpec {
  std::string path;         // e.g. "bench entropy"
  std::string description;  // one line for --help
  CommandConfigure configure;
};

// Adds a subcommand; returns true so it can initialise a static.
bool RegisterCommand(std::string path, std::string description, CommandConfigure configure);
// All registered commands, in registration order.
const std::vector<CommandSpec>& RegisteredCommands();

}  // namespace kvstash::cli
