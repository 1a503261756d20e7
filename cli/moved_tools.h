// The old spellings of the commands that left `kvstash` for their own tools, kept as
// aliases for one release: `kvstash bench X ...` runs `kvstash-bench X ...` and
// `kvstash demo ...` runs `kvstash-demo ...`, with the same arguments otherwise
// (options before the word, such as --log-level, included).
//
// The alias prints one line to stderr saying where the command moved, then execs the
// sibling binary: the one in the directory of /proc/self/exe, else the first on PATH.
// The exit status is then the new tool's. When neither exists (or cannot be run) it
// prints an error naming the expected path and the exit status is 127, the shell's
// "command not found".
//
// Thread-safety: call once, from main(), before any other thread starts.
#pragma once

#include <optional>

namespace kvstash::cli {

// When argv is an old spelling, does not return unless the exec failed: then returns
// 127. Returns nullopt when argv is not an old spelling (parse it as usual).
std::optional<int> RunMovedTool(int argc, char** argv);

}  // namespace kvstash::cli
