// CLI11 validators for output flags (`--out DIR`, `--json FILE`), so that a command
// which writes its results after minutes of work refuses an unusable path at parse time,
// before any work (usage error, exit 2, naming the reason).
//
// WritableOutputDir: the folder passes when it is a directory this process can create a file in, or when
// it does not exist yet and its nearest existing ancestor is such a directory (the
// command creates it). The check creates and removes one empty file there
// (".kvstash-write-check-XXXXXX"): permission bits alone say nothing for root, and
// nothing for read-only mounts or /proc.
// Errors (CLI11 ValidationError text, exit 2 through the command runner): "DIR is not a
// folder", "cannot write into DIR (<strerror>)".
// Thread-safety: the validator is stateless.
#pragma once

#include <CLI/CLI.hpp>

namespace kvstash::cli {

CLI::Validator WritableOutputDir();

// Validator of an output file flag (`--json FILE`): FILE is not a folder; an existing
// FILE is writable by this process (access(2)), a new one is not a dangling link and
// its folder exists and is writable. (The write itself can still fail: a full disk, an
// immutable file as root; the caller checks its write.)
const CLI::Validator& WritableOutputFile();

}  // namespace kvstash::cli
