// `kvstash`: the one command-line tool. Subcommands register themselves from their own
// files in cli/ (see command_registry.h); `kvstash --help` lists them.
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/command_registry.h"
#include "common/logging.h"

namespace {

// Finds or creates the nested subcommand for `path` ("bench entropy").
CLI::App* SubcommandFor(CLI::App* root, const std::string& path,
                        std::map<std::string, CLI::App*>& made) {
  std::istringstream words(path);
  std::string word, prefix;
  CLI::App* parent = root;
  while (words >> word) {
    prefix += (prefix.empty() ? "" : " ") + word;
    auto it = made.find(prefix);
    if (it == made.end()) {
      CLI::App* sub = parent->add_subcommand(word);
      it = made.emplace(prefix, sub).first;
    }
    parent = it->second;
  }
  return parent;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvstash: a store for LLM prefix (KV) caches with lossless (spec) and "
               "lossy (dckv) compression"};
  app.require_subcommand(1, 1);
  app.footer("Exit status: 0 success; 1 the request failed (server or I/O error); 2 usage "
             "error (bad flag or value, file too large for the server); 3 not stored (get: the "
             "chunk, or with --state-out its state record).");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str()
      ->each([](const std::string& v) {
        if (!kvstash::SetLogLevel(v)) throw CLI::ValidationError("--log-level", "unknown level");
      });

  std::map<std::string, CLI::App*> made;
  int exit_code = 0;
  for (const auto& spec : kvstash::cli::RegisteredCommands()) {
    CLI::App* cmd = SubcommandFor(&app, spec.path, made);
    cmd->description(spec.description);
    auto action = std::make_shared<kvstash::cli::CommandAction>(spec.configure(cmd));
    cmd->callback([action, &exit_code] { exit_code = (*action)(); });
  }
  // A group that is not itself a command ("bench") must be given one of its children,
  // and its --help line lists them.
  for (auto& [path, cmd] : made) {
    bool is_command = false;
    for (const auto& spec : kvstash::cli::RegisteredCommands()) is_command |= spec.path == path;
    cmd->require_subcommand(is_command ? 0 : 1, 1);
    if (!is_command) {
      std::string children;
      for (const CLI::App* sub : cmd->get_subcommands({}))
        children += (children.empty() ? "" : ", ") + sub->get_name();
      cmd->description("Subcommands: " + children + " (kvstash " + path + " --help)");
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version exit 0; every usage error exits 2, as the commands' own do
    // (CLI11's codes are 100+).
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
