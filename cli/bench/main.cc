// `kvstash-bench`: the end-to-end benchmark tables (codec, entropy, link, prefill,
// server, state, store, trace), one file per subcommand in cli/bench/ registering
// itself (cli/command_registry.h); the drivers are benchmarks/drivers/.
#include "cli/command_runner.h"

int main(int argc, char** argv) {
  return kvstash::cli::RunRegisteredCommands(
      {.name = "kvstash-bench",
       .description = "kvstash-bench: the end-to-end benchmarks of kvstash (codecs, store, server, restore "
                      "over a slow link, prefix traces)",
       .footer = "Exit status: 0 success; 1 the run failed (model, server or I/O error); 2 usage error; 77 "
                 "skipped (link: not root, no ip, tc or /dev/net/tun)."},
      argc, argv);
}
