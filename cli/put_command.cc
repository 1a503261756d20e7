// `kvstash put`: stores one chunk payload file (docs/format/payload.md) on a server.
// A payload file that is not bound to a key yet (format version 1, as a codec writes
// it) is bound to --key before it is sent; one bound to another key is refused.
// The files' sizes are checked against the server's max_frame_bytes (from its HELLO)
// before they are read, so a file the server would refuse is never loaded.
#include <filesystem>
#include <iostream>

#include "cli/client_flags.h"
#include "cli/command_registry.h"
#include "kvstash/payload_format.h"

namespace kvstash::cli {
namespace {

struct PutOptions {
  ClientFlags client;
  std::string key, route, parent, payload_file, state_file;
  bool raw_kv = false, pin = false;
  uint16_t codec = 0;
};

// PUT body bytes besides payload and state: key, has_parent, parent, codec, two
// lengths, prefix_tokens (docs/protocol.md §5.3), and the chunk key that binding a
// version-1 payload adds to its header.
constexpr uint64_t kPutOverheadBytes =
    16 + 1 + 16 + 2 + 4 + 4 + 4 + (kPayloadHeaderBytes - kPayloadHeaderBytesUnbound);

int Fail(const Status& s, int code) {
  std::cerr << "kvstash put: " << s.ToString() << "\n";
  return code;
}

// Size of a regular file. Errors: InvalidArgument.
Result<uint64_t> FileSize(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::InvalidArgument(path + " is not a regular file");
  }
  const uint64_t n = std::filesystem::file_size(path, ec);
  if (ec) return Status::InvalidArgument(path + ": " + ec.message());
  return n;
}

int Run(const PutOptions& o) {
  PutChunk p;
  auto key = ParseKey(o.key);
  auto route = ParseKey(o.route.empty() ? o.key : o.route);
  auto payload_size = FileSize(o.payload_file);
  for (const Status& s : {key.status(), route.status(), payload_size.status()}) {
    if (!s.ok()) return Fail(s, 2);
  }
  uint64_t state_size = 0;
  if (!o.state_file.empty()) {
    auto n = FileSize(o.state_file);
    if (!n.ok()) return Fail(n.status(), 2);
    state_size = *n;
  }
  p.key = *key;
  p.route = *route;
  if (!o.parent.empty()) {
    auto parent = ParseKey(o.parent);
    if (!parent.ok()) return Fail(parent.status(), 2);
    p.parent = *parent;
  }
  auto client = o.client.Connect();
  if (!client.ok()) return Fail(client.status(), 2);
  auto max_frame = (*client)->MaxFrameBytes((*client)->ServerFor(p.route));
  if (!max_frame.ok()) return Fail(max_frame.status(), 1);
  if (*payload_size + state_size + kPutOverheadBytes > *max_frame) {
    return Fail(Status::InvalidArgument(
                    "payload " + std::to_string(*payload_size) + " + state " +
                    std::to_string(state_size) + " bytes exceed the server's max_frame_bytes " +
                    std::to_string(*max_frame) + " (not read, not sent)"),
                2);
  }
  auto payload = ReadFileBytes(o.payload_file);
  if (!payload.ok()) return Fail(payload.status(), 2);
  auto bound = BindPayloadToKey(*payload, p.key);
  if (!bound.ok()) return Fail(bound.status().WithContext(o.payload_file), 2);
  p.payload = std::move(bound).value();
  if (!o.state_file.empty()) {
    auto st = ReadFileBytes(o.state_file);
    if (!st.ok()) return Fail(st.status(), 2);
    p.state_record = std::move(st).value();
  }
  p.raw_kv = o.raw_kv;
  p.target_codec = static_cast<CodecId>(o.codec);
  p.pin = o.pin;
  const size_t bytes = p.payload.size();
  auto r = (*client)->PutWithResult(p);
  if (!r.ok()) return Fail(r.status(), 1);
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
      cmd->add_option("--payload", o->payload_file,
                      "Chunk payload file (an unbound, version-1 payload is bound to --key)")
          ->required();
      cmd->add_option("--state", o->state_file, "Recurrent-state record file");
      CLI::Option* raw = cmd->add_flag("--raw-kv", o->raw_kv,
                                       "Payload is raw KV (codec 0) for the server to encode");
      cmd->add_option("--codec", o->codec,
                      "Codec id the server encodes the raw KV with (needs --raw-kv; 0 raw, 2 dckv)")
          ->capture_default_str()
          ->needs(raw);
      cmd->add_flag("--pin", o->pin, "Pin the chunk (never evicted)");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
