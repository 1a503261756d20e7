// The command line of one tool (`kvstash`, `kvstash-bench`, `kvstash-demo`) built from
// the commands registered in its executable (command_registry.h): the shared body of
// the three small mains.
//
// Every tool takes `--log-level LEVEL` before its subcommand and `--help`; a group
// that is not itself a command ("calibrate") must be given one of its children, and
// its --help line lists them. Exit status: the chosen command's action; 0 for --help;
// 2 for any usage error (CLI11's own codes are 100+).
//
// Thread-safety: call once, from main().
#pragma once

#include <string>

namespace kvstash::cli {

struct ToolInfo {
  std::string name;         // "kvstash-bench": used in the group lines of --help
  std::string description;  // --help heading; a command registered at "" replaces it
  std::string footer;       // --help footer (exit statuses, related tools); may be ""
};

// Parses argv against every registered command and runs the chosen one; returns the
// process exit status.
int RunRegisteredCommands(const ToolInfo& tool, int argc, char** argv);

}  // namespace kvstash::cli
