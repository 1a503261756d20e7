// A CLI11 validator for an output folder flag (`--out DIR`), so that a command which
// writes its results after minutes of work refuses an unusable folder at parse time,
// before any work.
//
// The folder passes when it is a directory this process can create a file in, or when
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

}  // namespace kvstash::cli
