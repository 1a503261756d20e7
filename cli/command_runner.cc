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

// The command words of argv (after the tool's --log-level): `matched`, the command they
// name ("put", "calibrate dckv"; empty for none), and `unknown`, the words up to the
// first that names no command ("nosuch" for `kvstash nosuch`, "calibrate nosuch" for
// `kvstash calibrate nosuch`; empty when every word named one). CLI11 reports an unknown
// word as "A subcommand is required", which hides the typo, and its other parse errors
// without the command they belong to.
struct CommandWords {
  std::string matched;
  std::string unknown;
  std::string unknown_option;  // the first option before any command that the tool lacks
};
CommandWords ParseCommandWords(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::string path, unknown_option;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (current == &app && a == "--log-level") {
      ++i;
      continue;
    }
    if (a.starts_with("-")) {
      if (current == &app && unknown_option.empty() &&
          app.get_option_no_throw(a.substr(0, a.find('='))) == nullptr && a != "-h" && a != "--help") {
        unknown_option = a.substr(0, a.find('='));
      }
      continue;
    }
    CLI::App* next = nullptr;
    for (CLI::App* sub : current->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->check_name(a)) next = sub;
    }
    const std::string matched = path;
    path += (path.empty() ? "" : " ") + a;
    if (next == nullptr) return {matched, path, unknown_option};
    if (next->get_subcommands([](CLI::App*) { return true; }).empty()) return {path, "", unknown_option};
    current = next;
  }
  return {path, "", unknown_option};
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
    // --help / --version exit 0; every usage error exits 2, as the commands' own do.
    if (e.get_exit_code() == 0) return app.exit(e);
    const CommandWords words = has_subcommands ? ParseCommandWords(app, argc, argv) : CommandWords{};
    if (words.matched.empty() && !words.unknown_option.empty()) {
      std::fprintf(stderr, "%s: unknown option '%s' before the command (%s --help lists the options)\n",
                   tool.name.c_str(), words.unknown_option.c_str(), tool.name.c_str());
      return 2;
    }
    if (!words.unknown.empty()) {
      std::fprintf(stderr, "%s: unknown command '%s' (%s --help lists the commands)\n", tool.name.c_str(),
                   words.unknown.c_str(), tool.name.c_str());
      return 2;
    }
    // "kvstash put: --key is required" and where the options are listed.
    const std::string command = tool.name + (words.matched.empty() ? "" : " " + words.matched);
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", command.c_str(), e.what(),
                 command.c_str());
    return 2;
  }
  return exit_code;
}

}  // namespace kvstash::cli
