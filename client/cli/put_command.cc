// `kvstash put`: stores one chunk payload file (docs/format/payload.md) on a server.
#include <iostream>

#include "client/cli/client_flags.h"
#include "client/cli/command_registry.h"

namespace kvstash::cli {
namespace {

struct PutOptions {
  ClientFlags client;
  std::string key, route, parent, payload_file, state_file;
  bool raw_kv = false, pin = false;
  uint16_t codec = 0;
};

int Run(const PutOptions& o) {
  PutChunk p;
  auto key = ParseKey(o.key);
  auto route = ParseKey(o.route.empty() ? o.key : o.route);
  auto payload = ReadFileBytes(o.payload_file);
  for (const Status& s : {key.status(), route.status(), payload.status()}) {
    if (!s.ok()) {
      std::cerr << "kvstash put: " << s.ToString() << "\n";
      return 2;
    }
  }
  p.key = *key;
  p.route = *route;
  p.payload = std::move(payload).value();
  if (!o.parent.empty()) {
    auto parent = ParseKey(o.parent);
    if (!parent.ok()) {
      std::cerr << "kvstash put: " << parent.status().ToString() << "\n";
      return 2;
    }
    p.parent = *parent;
  }
  if (!o.state_file.empty()) {
    auto st = ReadFileBytes(o.state_file);
    if (!st.ok()) {
      std::cerr << "kvstash put: " << st.status().ToString() << "\n";
      return 2;
    }
    p.state_record = std::move(st).value();
  }
  p.raw_kv = o.raw_kv;
  p.target_codec = static_cast<CodecId>(o.codec);
  p.pin = o.pin;
  auto client = o.client.Connect();
  if (!client.ok()) {
    std::cerr << "kvstash put: " << client.status().ToString() << "\n";
    return 2;
  }
  const size_t bytes = p.payload.size();
  auto r = (*client)->PutWithResult(p);
  if (!r.ok()) {
    std::cerr << "kvstash put: " << r.status().ToString() << "\n";
    return 1;
  }
  std::cout << "stored " << o.key << " (" << bytes << " bytes sent, " << r->stored_bytes
            << " stored)\n";
  if (r->memory) std::cout << FormatRequestMemory(*r->memory) << "\n";
  return 0;
}

const bool kRegistered = RegisterCommand(
    "put", "Store a chunk payload file on a kvstash server", [](CLI::App* cmd) {
      auto o = std::make_shared<PutOptions>();
      o->client.Add(cmd);
      cmd->add_option("--key", o->key, "Stored chunk key (32 hex digits)")->required();
      cmd->add_option("--route", o->route, "First chunk key of the prefix (default: --key)");
      cmd->add_option("--parent", o->parent, "Previous chunk key of the prefix");
      cmd->add_option("--payload", o->payload_file, "Chunk payload file")->required();
      cmd->add_option("--state", o->state_file, "Recurrent-state record file");
      cmd->add_flag("--raw-kv", o->raw_kv, "Payload is raw KV for the server to encode");
      cmd->add_option("--codec", o->codec, "Codec id the server encodes raw KV with")
          ->capture_default_str();
      cmd->add_flag("--pin", o->pin, "Pin the chunk (never evicted)");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
