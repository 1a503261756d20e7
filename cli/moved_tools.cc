#include "cli/moved_tools.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::cli {
namespace {

struct MovedTool {
  std::string_view word;  // the old subcommand: kvstash <word> ...
  std::string_view tool;  // the binary it moved to
};

constexpr MovedTool kMoved[] = {{"bench", "kvstash-bench"}, {"demo", "kvstash-demo"}};

// Index in argv of the first word that is not a `kvstash` option (--log-level takes a
// value), or argc.
int FirstWord(int argc, char** argv) {
  int i = 1;
  while (i < argc) {
    const std::string_view a = argv[i];
    if (a == "--log-level") {
      i += 2;
    } else if (a.starts_with("--log-level=")) {
      i += 1;
    } else {
      break;
    }
  }
  return i;
}

}  // namespace

std::optional<int> RunMovedTool(int argc, char** argv) {
  const int w = FirstWord(argc, argv);
  if (w >= argc) return std::nullopt;
  const MovedTool* moved = nullptr;
  for (const MovedTool& m : kMoved) {
    if (argv[w] == m.word) moved = &m;
  }
  if (moved == nullptr) return std::nullopt;

  // "'kvstash bench codec' moved to 'kvstash-bench codec'": the subcommand, if any.
  std::string sub;
  if (w + 1 < argc && argv[w + 1][0] != '-' && moved->word == "bench") sub = std::string(" ") + argv[w + 1];
  std::fprintf(stderr, "kvstash: 'kvstash %s%s' moved to '%s%s'; this alias goes away in the next release\n",
               std::string(moved->word).c_str(), sub.c_str(), std::string(moved->tool).c_str(), sub.c_str());

  // The new tool's argv: the same words without the moved one (argv[0] is set below).
  const std::string tool(moved->tool);
  std::vector<char*> args;
  args.push_back(nullptr);
  for (int i = 1; i < argc; ++i) {
    if (i != w) args.push_back(argv[i]);
  }
  args.push_back(nullptr);

  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string sibling = ec ? "/proc/self/exe: " + ec.message() : (self.parent_path() / tool).string();
  int sibling_errno = ENOENT;
  if (!ec) {
    args[0] = const_cast<char*>(sibling.c_str());
    execv(sibling.c_str(), args.data());
    sibling_errno = errno;
  }
  args[0] = const_cast<char*>(tool.c_str());
  execvp(tool.c_str(), args.data());
  std::fprintf(stderr, "kvstash: cannot run %s (%s), and no %s on PATH can be run (%s)\n", sibling.c_str(),
               std::strerror(sibling_errno), tool.c_str(), std::strerror(errno));
  return 127;
}

}  // namespace kvstash::cli
