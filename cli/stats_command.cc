// `kvstash stats`: prints a server's statistics document (the /v1/stats JSON).
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/client_flags.h"
#include "cli/command_registry.h"

namespace kvstash::cli {
namespace {

struct StatsCmdOptions {
  ClientFlags client;
};

int Run(const StatsCmdOptions& o) {
  auto client = o.client.Connect();
  if (!client.ok()) {
    std::cerr << "kvstash stats: " << client.status().ToString() << "\n";
    return 2;
  }
  int rc = 0;
  for (size_t i = 0; i < o.client.servers.size(); ++i) {
    auto r = (*client)->Stats(i);
    if (!r.ok()) {
      std::cerr << "kvstash stats: " << o.client.servers[i] << ": " << r.status().ToString() << "\n";
      rc = 1;
      continue;
    }
    std::cout << nlohmann::json::parse(*r).dump(1) << "\n";
  }
  return rc;
}

const bool kRegistered = RegisterCommand(
    "stats", "Print the statistics of kvstash servers", [](CLI::App* cmd) {
      auto o = std::make_shared<StatsCmdOptions>();
      o->client.Add(cmd);
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
