// Writing a benchmark's JSON results (`--json FILE`), shared by the `kvstash-bench` subcommands.
// Thread-safety: call from the command's thread.
#pragma once

#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace kvstash::cli {

// Writes j.dump(indent) and a newline to `path`. On failure prints
// "kvstash-<command>: cannot write <path>" (command: "bench state" and so on) to stderr
// and returns false.
bool WriteJsonFile(const std::string& command, const std::string& path, const nlohmann::json& j,
                   int indent = 1);

// Validator of an output file flag (`--json FILE`): FILE is not a folder; an existing
// FILE is writable by this process (access(2)), a new one is not a dangling link and
// its folder exists and is writable, so that a long benchmark does not end by failing
// to write its results. (The write itself can still fail: a full disk, an immutable
// file as root; the caller checks WriteJsonFile.) Usage error (exit 2) naming the reason.
const CLI::Validator& WritableOutputFile();

}  // namespace kvstash::cli
