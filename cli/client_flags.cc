#include "cli/client_flags.h"

#include <cstdlib>

namespace kvstash::cli {

void ClientFlags::Add(CLI::App* cmd) {
  cmd->add_option("--server", servers, "Server host:port (repeatable)")->capture_default_str();
  cmd->add_option("--tenant", tenant, "Tenant name")->capture_default_str();
  cmd->add_option("--credential", credential,
                  "Tenant credential (default: $KVSTASH_CREDENTIAL)");
  cmd->add_option("--deadline-ms", deadline_ms, "Per-call deadline")->capture_default_str();
}

ClientOptions ClientFlags::Options() const {
  ClientOptions o;
  o.servers = servers;
  o.tenant = tenant;
  o.credential = credential;
  if (o.credential.empty()) {
    if (const char* env = std::getenv("KVSTASH_CREDENTIAL")) o.credential = env;
  }
  o.client_name = "kvstash-cli";
  o.connections_per_server = 1;
  o.default_deadline = std::chrono::milliseconds(deadline_ms);
  return o;
}

Result<std::unique_ptr<Client>> ClientFlags::Connect() const { return Client::Create(Options()); }

Result<StoredKey> ParseKey(const std::string& hex) {
  StoredKey k{};
  if (hex.size() != 2 * k.size()) return Status::InvalidArgument("key must be 32 hex digits: " + hex);
  for (size_t i = 0; i < k.size(); ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1 ||
        !std::isxdigit(static_cast<unsigned char>(hex[2 * i])) ||
        !std::isxdigit(static_cast<unsigned char>(hex[2 * i + 1]))) {
      return Status::InvalidArgument("key is not hex: " + hex);
    }
    k[i] = static_cast<uint8_t>(v);
  }
  return k;
}

std::string FormatRequestMemory(const RequestMemory& m) {
  return "request memory " + std::to_string(m.total_bytes()) + " bytes = payload " +
         std::to_string(m.payload_bytes) + " (coded " + std::to_string(m.coded_bytes()) + " + " +
         std::to_string(m.raw_positions) + " uncompressed positions in " +
         std::to_string(m.raw_position_bytes) + " bytes) + state " + std::to_string(m.state_bytes);
}

}  // namespace kvstash::cli
