#include "cli/client_flags.h"

#include <cstdlib>

namespace kvstash::cli {

void ClientFlags::Add(CLI::App* cmd) {
  cmd->add_option("--server", servers, "Server host:port (repeatable)")->capture_default_str();
  cmd->add_option("--tenant", tenant, "Tenant name")->capture_default_str();
  cmd->add_option("--credential", credential,
                  "Tenant credential (default: $KVSTASH_CREDENTIAL)");
  cmd->add_option("--deadline-ms", deadline_ms, "Per-call deadline, 1 .. 3600000 ms")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  cmd->add_flag("--tls", tls.enabled, "Speak TLS to the servers (their config `tls`)");
  auto* ca = cmd->add_option("--tls-ca", tls.ca_file,
                  "PEM file of the CA that signed the servers' certificates (implies --tls; "
                  "default: the system's CA paths)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-server-name", tls.server_name,
                  "Name sent as SNI and checked against the certificates (implies --tls; default: "
                  "each server's host)");
  cmd->add_flag("--tls-insecure", [this](int64_t) { tls.verify_peer = false; },
                "Encrypt but do not verify the servers' certificates (implies --tls; tests only)")
      ->excludes(ca);
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
  o.tls = tls;
  o.tls.enabled = tls.enabled || !tls.ca_file.empty() || !tls.server_name.empty() || !tls.verify_peer;
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
