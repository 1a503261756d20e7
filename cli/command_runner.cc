#include "cli/command_runner.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "cli/command_registry.h"
#include "common/logging.h"

namespace kvstash::cli {
namespace {

// Finds or creates the nested subcommand for `path` ("calibrate dckv"); "" is `root`.
CLI::App* SubcommandFor(CLI::App* root, const std::string& path, std::map<std::string, CLI::App*>& made) {
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

// The command words of argv (after the tool's --log-level) when they name no command:
// "nosuch" for `kvstash nosuch`, "calibrate nosuch" for `kvstash calibrate nosuch`;
// empty when they do, or when there is no word to name one. CLI11 reports both as "A
// subcommand is required", which hides the typo.
std::string UnknownCommand(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (current == &app && a == "--log-level") {
      ++i;
      continue;
    }
    if (a.starts_with("-")) continue;
    CLI::App* next = nullptr;
    for (CLI::App* sub : current->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->check_name(a)) next = sub;
    }
    path += (path.empty() ? "" : " ") + a;
    if (next == nullptr) return path;
    if (next->get_subcommands([](CLI::App*) { return true; }).empty()) return "";
    current = next;
  }
  return "";
}

}  // namespace

int RunRegisteredCommands(const ToolInfo& tool, int argc, char** argv) {
  CLI::App app{tool.description};
  if (!tool.footer.empty()) app.footer(tool.footer);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str()
      ->each([](const std::string& v) {
        if (!SetLogLevel(v)) throw CLI::ValidationError("--log-level", "unknown level");
      });

  std::map<std::string, CLI::App*> made;
  int exit_code = 0;
  bool has_subcommands = false;
  for (const auto& spec : RegisteredCommands()) {
    CLI::App* cmd = SubcommandFor(&app, spec.path, made);
    has_subcommands |= !spec.path.empty();
    cmd->description(spec.description);
    auto action = std::make_shared<CommandAction>(spec.configure(cmd));
    cmd->callback([action, &exit_code] { exit_code = (*action)(); });
  }
  if (has_subcommands) app.require_subcommand(1, 1);
  // A group that is not itself a command ("calibrate") must be given one of its
  // children, and its --help line lists them.
  for (auto& [path, cmd] : made) {
    bool is_command = false;
    for (const auto& spec : RegisteredCommands()) is_command |= spec.path == path;
    cmd->require_subcommand(is_command ? 0 : 1, 1);
    if (!is_command) {
      std::string children;
      for (const CLI::App* sub : cmd->get_subcommands({}))
        children += (children.empty() ? "" : ", ") + sub->get_name();
      cmd->description("Subcommands: " + children + " (" + tool.name + " " + path + " --help)");
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (has_subcommands && e.get_exit_code() != 0) {
      if (const std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
        std::fprintf(stderr, "%s: unknown command '%s' (%s --help lists the commands)\n", tool.name.c_str(),
                     unknown.c_str(), tool.name.c_str());
        return 2;
      }
    }
    // --help / --version exit 0; every usage error exits 2, as the commands' own do.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace kvstash::cli
