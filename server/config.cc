#include "server/config.h"

#include <boost/asio/ip/address.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace kvstash::server {
namespace {

// Reads doc[key] into *out when present; rejects a wrong type or range.
template <typename T>
Status Read(const nlohmann::json& doc, const char* key, T* out) {
  auto it = doc.find(key);
  if (it == doc.end()) return Status::Ok();
  try {
    if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) return Status::InvalidArgument(std::string(key) + " must be a string");
      *out = it->template get<std::string>();
    } else {
      if (!it->is_number_unsigned()) {
        return Status::InvalidArgument(std::string(key) + " must be a non-negative integer");
      }
      const uint64_t v = it->template get<uint64_t>();
      if (v > std::numeric_limits<T>::max()) {
        return Status::InvalidArgument(std::string(key) + " is out of range");
      }
      *out = static_cast<T>(v);
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string(key) + ": " + e.what());
  }
  return Status::Ok();
}

Status OnlyKeys(const nlohmann::json& doc, const char* where, std::set<std::string> allowed) {
  if (!doc.is_object()) return Status::InvalidArgument(std::string(where) + " must be an object");
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!allowed.count(it.key())) {
      return Status::InvalidArgument(std::string("unknown key \"") + it.key() + "\" in " + where);
    }
  }
  return Status::Ok();
}

bool IsHex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF)
// without control characters (U+0000..U+001F, U+007F).
bool IsPrintableUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xe0) == 0xc0) n = 1, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) n = 2, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) n = 3, cp = c & 0x07, min = 0x10000;
    else return false;
    if (i + static_cast<size_t>(n) >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = cp << 6 | (d & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

Status ServerConfig::Validate() const {
  if (tenants.empty()) return Status::InvalidArgument("config has no tenants");
  // One port for both listeners on overlapping addresses fails later as "Address already
  // in use", which points at another process.
  const auto any = [](const std::string& a) { return a == "0.0.0.0" || a == "::"; };
  if (port != 0 && port == http_port && (listen == http_listen || any(listen) || any(http_listen))) {
    return Status::InvalidArgument("port and http_port are both " + std::to_string(port) +
                                   ": the protocol and HTTP listeners need different ports");
  }
  if (server_id.size() > 255) {
    return Status::InvalidArgument("server_id is " + std::to_string(server_id.size()) +
                                   " bytes; at most 255 (the HELLO reply carries it with a "
                                   "one-byte length)");
  }
  // It appears in JSON (STATS, /v1/stats) and Prometheus labels, like tenant names.
  if (!IsPrintableUtf8(server_id)) {
    return Status::InvalidArgument("server_id must be UTF-8 without control characters");
  }
  std::set<std::string> names;
  for (const TenantConfig& t : tenants) {
    if (t.name.empty() || t.name.size() > 255) {
      return Status::InvalidArgument("tenant name must be 1..255 bytes");
    }
    // Tenant names become Prometheus label values and JSON keys: one that is not UTF-8
    // would make /metrics unscrapeable for the whole node.
    if (!IsPrintableUtf8(t.name)) {
      return Status::InvalidArgument("tenant name must be UTF-8 without control characters");
    }
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("tenant \"" + t.name + "\" is listed twice");
    }
    if (t.credential.empty() == t.credential_sha256.empty()) {
      return Status::InvalidArgument("tenant \"" + t.name +
                                     "\" needs exactly one of credential, credential_sha256");
    }
    if (t.dckv_artifact.empty() != t.dckv_artifact_sha256.empty()) {
      return Status::InvalidArgument("tenant \"" + t.name +
                                     "\" needs both dckv_artifact and dckv_artifact_sha256");
    }
    if (!t.dckv_artifact_sha256.empty() && !IsHex64(t.dckv_artifact_sha256)) {
      return Status::InvalidArgument("tenant \"" + t.name +
                                     "\" dckv_artifact_sha256 is not 64 hex digits");
    }
    if (!t.credential_sha256.empty() && !IsHex64(t.credential_sha256)) {
      return Status::InvalidArgument("tenant \"" + t.name +
                                     "\" credential_sha256 is not 64 hex digits");
    }
  }
  if (limits.max_frame_bytes < 1024 || limits.max_in_flight == 0 ||
      limits.max_connections == 0 || limits.idle_timeout_ms == 0 ||
      limits.io_timeout_ms == 0 || limits.hello_timeout_ms == 0 ||
      limits.min_transfer_bytes_per_s == 0) {
    return Status::InvalidArgument("limits must be nonzero (max_frame_bytes >= 1024)");
  }
  if (io_threads == 0 || worker_threads == 0 || io_threads > kMaxThreads || worker_threads > kMaxThreads) {
    return Status::InvalidArgument("io_threads and worker_threads must be 1.." + std::to_string(kMaxThreads) +
                                   ", not " + std::to_string(io_threads) + " and " +
                                   std::to_string(worker_threads));
  }
  if (history_points == 0 || history_points > 100000) {
    return Status::InvalidArgument("history_points must be 1..100000, not " +
                                   std::to_string(history_points));
  }
  if (history_interval_ms != 0 && history_interval_ms < 100) {
    return Status::InvalidArgument("history_interval_ms must be 0 (off) or >= 100, not " +
                                   std::to_string(history_interval_ms));
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return Status::InvalidArgument("tls needs both cert_file and key_file");
  }
  if (!store.is_object()) return Status::InvalidArgument("store must be an object");
  for (const std::string* a : {&listen, &http_listen}) {
    boost::system::error_code ec;
    boost::asio::ip::make_address(*a, ec);
    if (ec) return Status::InvalidArgument("bad listen address \"" + *a + "\" (an IP literal)");
  }
  return Status::Ok();
}

Result<ServerConfig> ParseServerConfig(const nlohmann::json& doc) {
  KVSTASH_RETURN_IF_ERROR(OnlyKeys(doc, "config",
                                   {"listen", "port", "http_listen", "http_port", "server_id", "io_threads",
                                    "worker_threads", "limits", "drain_grace_ms", "drain_timeout_ms", "tenants",
                                    "history_interval_ms", "history_points",
                                    "tls", "store", "chart_js", "ready_file"}));
  ServerConfig c;
  KVSTASH_RETURN_IF_ERROR(Read(doc, "listen", &c.listen));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "port", &c.port));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "http_port", &c.http_port));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "http_listen", &c.http_listen));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "server_id", &c.server_id));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "io_threads", &c.io_threads));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "worker_threads", &c.worker_threads));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "drain_grace_ms", &c.drain_grace_ms));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "drain_timeout_ms", &c.drain_timeout_ms));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "history_interval_ms", &c.history_interval_ms));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "history_points", &c.history_points));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "chart_js", &c.chart_js));
  KVSTASH_RETURN_IF_ERROR(Read(doc, "ready_file", &c.ready_file));
  if (auto it = doc.find("limits"); it != doc.end()) {
    const auto& l = *it;
    KVSTASH_RETURN_IF_ERROR(OnlyKeys(l, "limits",
                                     {"max_frame_bytes", "max_in_flight", "max_connections",
                                      "idle_timeout_ms", "io_timeout_ms", "hello_timeout_ms",
                                      "min_transfer_bytes_per_s"}));
    KVSTASH_RETURN_IF_ERROR(Read(l, "max_frame_bytes", &c.limits.max_frame_bytes));
    KVSTASH_RETURN_IF_ERROR(Read(l, "max_in_flight", &c.limits.max_in_flight));
    KVSTASH_RETURN_IF_ERROR(Read(l, "max_connections", &c.limits.max_connections));
    KVSTASH_RETURN_IF_ERROR(Read(l, "idle_timeout_ms", &c.limits.idle_timeout_ms));
    KVSTASH_RETURN_IF_ERROR(Read(l, "io_timeout_ms", &c.limits.io_timeout_ms));
    KVSTASH_RETURN_IF_ERROR(Read(l, "hello_timeout_ms", &c.limits.hello_timeout_ms));
    KVSTASH_RETURN_IF_ERROR(
        Read(l, "min_transfer_bytes_per_s", &c.limits.min_transfer_bytes_per_s));
  }
  if (auto it = doc.find("tenants"); it != doc.end()) {
    if (!it->is_array()) return Status::InvalidArgument("tenants must be an array");
    for (const auto& t : *it) {
      KVSTASH_RETURN_IF_ERROR(OnlyKeys(t, "tenant",
                                       {"name", "credential", "credential_sha256",
                                        "dckv_artifact", "dckv_artifact_sha256"}));
      TenantConfig tc;
      KVSTASH_RETURN_IF_ERROR(Read(t, "name", &tc.name));
      KVSTASH_RETURN_IF_ERROR(Read(t, "credential", &tc.credential));
      KVSTASH_RETURN_IF_ERROR(Read(t, "credential_sha256", &tc.credential_sha256));
      KVSTASH_RETURN_IF_ERROR(Read(t, "dckv_artifact", &tc.dckv_artifact));
      KVSTASH_RETURN_IF_ERROR(Read(t, "dckv_artifact_sha256", &tc.dckv_artifact_sha256));
      c.tenants.push_back(std::move(tc));
    }
  }
  if (auto it = doc.find("tls"); it != doc.end()) {
    KVSTASH_RETURN_IF_ERROR(OnlyKeys(*it, "tls", {"cert_file", "key_file"}));
    KVSTASH_RETURN_IF_ERROR(Read(*it, "cert_file", &c.tls_cert_file));
    KVSTASH_RETURN_IF_ERROR(Read(*it, "key_file", &c.tls_key_file));
  }
  if (auto it = doc.find("store"); it != doc.end()) {
    if (!it->is_object()) return Status::InvalidArgument("store must be an object");
    c.store = *it;
  }
  return c;
}

Result<uint64_t> ParseByteSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 20) {
    return Status::InvalidArgument("\"" + text + "\" is not a byte count (e.g. 64G, 512MiB)");
  }
  static const std::pair<const char*, uint64_t> kSuffixes[] = {
      {"", 1},          {"B", 1},
      {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"KB", 1000ull},
      {"M", 1ull << 20}, {"MiB", 1ull << 20}, {"MB", 1000000ull},
      {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"GB", 1000000000ull},
      {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"TB", 1000000000000ull}};
  const std::string suffix = text.substr(digits);
  for (const auto& [name, unit] : kSuffixes) {
    if (suffix != name) continue;
    const std::string number = text.substr(0, digits);
    if (number.size() == 20 && number > "18446744073709551615") break;
    const uint64_t v = std::stoull(number);
    if (v > std::numeric_limits<uint64_t>::max() / unit) break;
    return v * unit;
  }
  return Status::InvalidArgument("\"" + text + "\" is not a byte count below 2^64 (suffixes: " +
                                 "K M G T, KiB MiB GiB TiB, KB MB GB TB)");
}

Result<ServerConfig> LoadServerConfig(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return Status::IOError("config file " + path + " is not a regular file");
  std::ifstream in(path);
  if (!in) return Status::IOError("cannot open config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument("config file " + path + " is not JSON");
  auto c = ParseServerConfig(doc);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

}  // namespace kvstash::server
