// Flags shared by the commands that talk to a server (`kvstash` put, get, lookup,
// stats, inspect; `kvstash-demo`): --server (repeatable), --tenant, --credential (or the
// KVSTASH_CREDENTIAL environment variable), --deadline-ms, and TLS to a server whose
// protocol port speaks it (--tls, --tls-ca FILE, --tls-server-name NAME,
// --tls-insecure: ClientTlsOptions); and hex key parsing.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "common/file_bytes.h"  // ReadFileBytes / WriteFileBytes, for the commands
#include "kvstash/client.h"
#include "kvstash/prefix_key.h"

namespace kvstash::cli {

struct ClientFlags {
  std::vector<std::string> servers = {"127.0.0.1:7470"};
  std::string tenant = "default";
  std::string credential;
  uint32_t deadline_ms = 5000;
  ClientTlsOptions tls;  // enabled by --tls or by any other --tls-* flag

  void Add(CLI::App* cmd);
  // The client options of the flags (credential from $KVSTASH_CREDENTIAL when unset,
  // client name "kvstash-cli", one connection per server, TLS as flagged).
  ClientOptions Options() const;
  // A client from the flags. Errors: Client::Create's.
  Result<std::unique_ptr<Client>> Connect() const;
};

// 32 hex digits -> StoredKey. Errors: InvalidArgument.
Result<StoredKey> ParseKey(const std::string& hex);
// One line: "request memory N bytes = payload P (coded C + R uncompressed positions
// in B bytes) + state S" (put, get).
std::string FormatRequestMemory(const RequestMemory& m);

}  // namespace kvstash::cli
