// Writing a benchmark's JSON results (`--json FILE`), shared by the `kvstash-bench` subcommands.
// Thread-safety: call from the command's thread.
#pragma once

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

namespace kvstash::cli {

// Writes j.dump(indent) and a newline to `path`. On failure prints
// "kvstash-<command>: cannot write <path>" (command: "bench state" and so on) to stderr
// and returns false.
bool WriteJsonFile(const std::string& command, const std::string& path, const nlohmann::json& j,
                   int indent = 1);

}  // namespace kvstash::cli
