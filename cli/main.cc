// `kvstash`: the product's command-line tool (put, get, lookup, stats, keys, inspect,
// calibrate, generate). Subcommands register themselves from their own files in cli/
// (command_registry.h); `kvstash --help` lists them. Benchmarks are `kvstash-bench`
// (cli/bench/) and the end-to-end demo is `kvstash-demo` (cli/demo/); their old
// spellings here are aliases for one release (moved_tools.h).
#include "cli/command_runner.h"
#include "cli/moved_tools.h"

int main(int argc, char** argv) {
  if (auto moved = kvstash::cli::RunMovedTool(argc, argv)) return *moved;
  return kvstash::cli::RunRegisteredCommands(
      {.name = "kvstash",
       .description = "kvstash: a store for LLM prefix (KV) caches with lossless (spec) and lossy (dckv) "
                      "compression",
       .footer = "Exit status: 0 success; 1 the request failed (server or I/O error); 2 usage error (bad flag "
                 "or value, file too large for the server); 3 not stored (get: the chunk, or with --state-out "
                 "its state record).\nBenchmarks: kvstash-bench --help. The end-to-end demo: kvstash-demo "
                 "--help."},
      argc, argv);
}
