// `kvstash lookup`: longest stored prefix of a chain of chunk keys (the "stored"
// values printed by `kvstash keys`).
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/client_flags.h"
#include "cli/command_registry.h"

namespace kvstash::cli {
namespace {

struct LookupCmdOptions {
  ClientFlags client;
  std::string keys;
  uint32_t chunk_tokens = 256;
  bool require_state = false;
};

int Run(const LookupCmdOptions& o) {
  std::vector<ChunkRef> chain;
  std::istringstream in(o.keys);
  for (std::string hex; std::getline(in, hex, ',');) {
    const size_t b = hex.find_first_not_of(" \t"), e = hex.find_last_not_of(" \t");
    hex = b == std::string::npos ? "" : hex.substr(b, e - b + 1);
    if (hex.empty()) {
      std::cerr << "kvstash lookup: --keys has an empty key (\"" << o.keys
                << "\"): give keys separated by single commas\n";
      return 2;
    }
    auto k = ParseKey(hex);
    if (!k.ok()) {
      std::cerr << "kvstash lookup: " << k.status().ToString() << "\n";
      return 2;
    }
    chain.push_back({*k, o.chunk_tokens});
  }
  if (!o.keys.empty() && o.keys.back() == ',') {
    std::cerr << "kvstash lookup: --keys ends with a comma (\"" << o.keys << "\")\n";
    return 2;
  }
  if (chain.empty()) {
    std::cerr << "kvstash lookup: no keys\n";
    return 2;
  }
  auto client = o.client.Connect();
  if (!client.ok()) {
    std::cerr << "kvstash lookup: " << client.status().ToString() << "\n";
    return 2;
  }
  auto r = (*client)->Lookup(chain, o.require_state);
  if (!r.ok()) {
    std::cerr << "kvstash lookup: " << r.status().ToString() << "\n";
    return 1;
  }
  nlohmann::json j = {{"chunks", chain.size()},
                      {"matched_chunks", r->matched_chunks},
                      {"matched_tokens", r->matched_tokens},
                      {"server", o.client.servers[(*client)->ServerFor(chain[0].key)]}};
  std::cout << j.dump() << "\n";
  return 0;
}

const bool kRegistered = RegisterCommand(
    "lookup", "Longest stored prefix of a chain of chunk keys", [](CLI::App* cmd) {
      auto o = std::make_shared<LookupCmdOptions>();
      o->client.Add(cmd);
      cmd->add_option("--keys", o->keys, "Stored chunk keys in chain order, comma separated")
          ->required();
      cmd->add_option("--chunk-tokens", o->chunk_tokens, "Tokens per chunk (>= 1)")
          ->capture_default_str()
          ->check(CLI::Range(1u, 1u << 20));
      cmd->add_flag("--require-state", o->require_state, "End at a recurrent-state record");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
