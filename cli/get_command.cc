// `kvstash get`: fetches one chunk payload (and optionally its state record) from a
// server into files. Both files are written or neither: each goes to FILE.part first
// and is renamed once every write succeeded.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/client_flags.h"
#include "cli/command_registry.h"

namespace kvstash::cli {
namespace {

struct GetCmdOptions {
  ClientFlags client;
  std::string key, route, out, state_out;
  bool decoded = false;
};

int Run(const GetCmdOptions& o) {
  auto key = ParseKey(o.key);
  auto route = ParseKey(o.route.empty() ? o.key : o.route);
  if (!key.ok() || !route.ok()) {
    std::cerr << "kvstash get: " << (!key.ok() ? key.status() : route.status()).ToString() << "\n";
    return 2;
  }
  if (!o.state_out.empty()) {
    std::error_code ec1, ec2;
    const auto out = std::filesystem::weakly_canonical(o.out, ec1);
    const auto state_out = std::filesystem::weakly_canonical(o.state_out, ec2);
    if (o.out == o.state_out || (!ec1 && !ec2 && out == state_out)) {
      std::cerr << "kvstash get: --out and --state-out name the same file\n";
      return 2;
    }
  }
  auto client = o.client.Connect();
  if (!client.ok()) {
    std::cerr << "kvstash get: " << client.status().ToString() << "\n";
    return 2;
  }
  auto r = (*client)->Get(*route, *key, GetOptions{o.decoded, !o.state_out.empty()});
  if (!r.ok()) {
    std::cerr << "kvstash get: " << r.status().ToString() << "\n";
    return r.status().IsNotFound() ? 3 : 1;
  }
  if (!o.state_out.empty() && r->state_record.empty()) {
    // KV + state together or nothing (hybrid models need both to continue).
    std::cerr << "kvstash get: the chunk has no recurrent-state record; neither " << o.out
              << " nor " << o.state_out << " written\n";
    return 3;
  }
  std::vector<std::pair<std::string, const std::vector<uint8_t>*>> files{{o.out, &r->payload}};
  if (!o.state_out.empty()) files.emplace_back(o.state_out, &r->state_record);
  Status s;
  for (const auto& [path, bytes] : files) {
    if (s.ok()) s = WriteFileBytes(path + ".part", *bytes);
  }
  size_t renamed = 0;
  for (const auto& [path, bytes] : files) {
    if (!s.ok()) break;
    if (std::rename((path + ".part").c_str(), path.c_str()) != 0) {
      s = Status::IOError("cannot rename " + path + ".part to " + path);
    } else {
      ++renamed;
    }
  }
  if (!s.ok()) {
    for (const auto& [path, bytes] : files) std::remove((path + ".part").c_str());
    std::cerr << "kvstash get: " << s.ToString() << (renamed == 0 ? " (no file written)" : "") << "\n";
    return 1;
  }
  std::cout << "wrote " << r->payload.size() << " bytes to " << o.out << "\n";
  if (r->memory) std::cout << FormatRequestMemory(*r->memory) << "\n";
  return 0;
}

const bool kRegistered = RegisterCommand(
    "get", "Fetch a chunk payload from a kvstash server (exit 3 on a miss, or with --state-out "
    "when the chunk has no state record)", [](CLI::App* cmd) {
      auto o = std::make_shared<GetCmdOptions>();
      o->client.Add(cmd);
      cmd->add_option("--key", o->key, "Stored chunk key (32 hex digits)")->required();
      cmd->add_option("--route", o->route, "First chunk key of the prefix (default: --key)");
      cmd->add_option("--out", o->out, "Output file for the payload")->required();
      cmd->add_option("--state-out", o->state_out, "Also fetch the state record into FILE (none stored: exit 3, no file written)");
      cmd->add_flag("--decoded", o->decoded, "Ask for the decoded (codec raw) chunk");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
