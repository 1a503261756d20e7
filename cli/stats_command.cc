// `kvstash stats`: prints the tenant's statistics document (the STATS reply: this
// tenant's traffic only, docs/protocol.md §8) of one server, or of several as one JSON
// object keyed by host:port.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/client_flags.h"
#include "cli/command_registry.h"

namespace kvstash::cli {
namespace {

struct StatsCmdOptions {
  ClientFlags client;
};

// One server: its STATS document. Several: one JSON object keyed by each server's
// host:port as given, in that order (a server that fails is left out, its error on
// stderr, exit 1), so the output is always one JSON document.
int Run(const StatsCmdOptions& o) {
  auto client = o.client.Connect();
  if (!client.ok()) {
    std::cerr << "kvstash stats: " << client.status().ToString() << "\n";
    return 2;
  }
  int rc = 0;
  nlohmann::ordered_json by_server = nlohmann::ordered_json::object();  // in --server order
  for (size_t i = 0; i < o.client.servers.size(); ++i) {
    auto r = (*client)->Stats(i);
    if (!r.ok()) {
      std::cerr << "kvstash stats: " << o.client.servers[i] << ": " << r.status().ToString() << "\n";
      rc = 1;
      continue;
    }
    by_server[o.client.servers[i]] = nlohmann::json::parse(*r);
  }
  if (o.client.servers.size() == 1) {
    if (rc == 0) std::cout << by_server.begin()->dump(1) << "\n";
  } else {
    std::cout << by_server.dump(1) << "\n";
  }
  return rc;
}

const bool kRegistered = RegisterCommand(
    "stats",
    "Print this tenant's statistics (STATS: its own traffic; the server-wide document is "
    "the HTTP port's /v1/stats): one server's document, or for several --server one JSON "
    "object keyed by host:port", [](CLI::App* cmd) {
      auto o = std::make_shared<StatsCmdOptions>();
      o->client.Add(cmd);
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
