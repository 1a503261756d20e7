// TenantTable: the credentials of the config, checked in constant time, and the key
// scoping that makes the tenant part of every namespace.
//
// A credential is never kept in clear: the table holds SHA-256(credential). A HELLO's
// credential is hashed and compared with CRYPTO_memcmp (OpenSSL's constant-time
// comparison) against the named tenant's digest; an unknown tenant name is compared
// against a fixed dummy digest so that the time taken does not tell names apart.
//
// Scoping: the server never stores a client's key as sent. ScopeKey(tenant, key) =
// first 16 bytes of SHA-256("kvstash.tenant-key.v1" || u8 len(tenant) || tenant || key),
// so two tenants that send the same key address different entries and no tenant can
// name another's entry (it would need a SHA-256 preimage).
//
// Thread-safety: immutable after construction; all methods may run concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "server/config.h"

namespace kvstash::server {

class TenantTable {
 public:
  // Errors: InvalidArgument for a bad credential_sha256 (ServerConfig::Validate's).
  static Result<TenantTable> Create(const std::vector<TenantConfig>& tenants);

  // Ok when `credential` is `tenant`'s; PermissionDenied otherwise (same message for
  // an unknown tenant and a wrong credential).
  Status Authenticate(std::string_view tenant, std::string_view credential) const;

  size_t size() const { return digests_.size(); }
  // The configured tenant names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, digest] : digests_) out.push_back(name);
    return out;
  }

 private:
  std::map<std::string, Digest256, std::less<>> digests_;
};

// The tenant-scoped store key of a client key (see the file comment).
StoredKey ScopeKey(std::string_view tenant, const StoredKey& key);

// SHA-256 of bytes (OpenSSL).
Digest256 Sha256(std::string_view bytes);

}  // namespace kvstash::server
