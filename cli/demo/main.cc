// `kvstash-demo`: the end-to-end demo (demo/demo.h); its one command, registered at
// the empty path, is the tool itself (cli/demo/demo_command.cc).
#include "cli/command_runner.h"

int main(int argc, char** argv) {
  return kvstash::cli::RunRegisteredCommands({.name = "kvstash-demo", .description = "", .footer = ""}, argc, argv);
}
