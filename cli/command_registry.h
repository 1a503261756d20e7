// Registry of the subcommands of the command-line tools: `kvstash` (the product
// commands, cli/), `kvstash-bench` (cli/bench/) and `kvstash-demo` (cli/demo/).
//
// Each subcommand lives in its own file and registers itself at static-initialisation
// time:
//
//   static const bool kRegistered = kvstash::cli::RegisterCommand(
//       "entropy", "Benchmark rANS coding on realistic symbol streams",
//       [](CLI::App* cmd) {
//         auto opts = std::make_shared<Options>();
//         cmd->add_option("--json", opts->json, "Write rows to FILE as JSON");
//         return [opts] { return RunBenchEntropy(*opts); };   // exit code
//       });
//
// The path's words create nested subcommands of the tool the file is compiled into
// ("calibrate dckv" -> kvstash calibrate dckv); the empty path is the tool itself
// (kvstash-demo has no subcommands). The configure function adds options and returns
// the action; the action's int is the process exit code. Command files are compiled
// into their executable itself (not a static library), so their registrations are
// never dropped; command_runner.h turns the registry into a command line.
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
  std::string path;         // e.g. "calibrate dckv"; "" for the tool itself
  std::string description;  // one line for --help
  CommandConfigure configure;
};

// Adds a subcommand; returns true so it can initialise a static.
bool RegisterCommand(std::string path, std::string description, CommandConfigure configure);
// All registered commands, in registration order.
const std::vector<CommandSpec>& RegisteredCommands();

}  // namespace kvstash::cli
