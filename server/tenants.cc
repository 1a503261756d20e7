#include "server/tenants.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

namespace kvstash::server {

Digest256 Sha256(std::string_view bytes) {
  Digest256 d{};
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), d.data());
  return d;
}

Result<TenantTable> TenantTable::Create(const std::vector<TenantConfig>& tenants) {
  TenantTable t;
  for (const TenantConfig& c : tenants) {
    Digest256 d{};
    if (!c.credential_sha256.empty()) {
      if (c.credential_sha256.size() != 64) {
        return Status::InvalidArgument("credential_sha256 is not 64 hex digits");
      }
      for (size_t i = 0; i < 32; ++i) {
        unsigned v = 0;
        if (std::sscanf(c.credential_sha256.c_str() + 2 * i, "%2x", &v) != 1) {
          return Status::InvalidArgument("credential_sha256 is not hex");
        }
        d[i] = static_cast<uint8_t>(v);
      }
    } else {
      d = Sha256(c.credential);
    }
    t.digests_[c.name] = d;
  }
  return t;
}

Status TenantTable::Authenticate(std::string_view tenant, std::string_view credential) const {
  static const Digest256 kDummy = Sha256("kvstash.no-such-tenant");
  const Digest256 given = Sha256(credential);
  auto it = digests_.find(tenant);
  const Digest256& want = it == digests_.end() ? kDummy : it->second;
  const bool same = CRYPTO_memcmp(given.data(), want.data(), want.size()) == 0;
  if (!same || it == digests_.end()) {
    return Status::PermissionDenied("unknown tenant or wrong credential");
  }
  return Status::Ok();
}

StoredKey ScopeKey(std::string_view tenant, const StoredKey& key) {
  static constexpr std::string_view kTag = "kvstash.tenant-key.v1";
  unsigned char buf[64 + 256 + 16];
  size_t n = 0;
  std::memcpy(buf, kTag.data(), kTag.size());
  n += kTag.size();
  buf[n++] = static_cast<unsigned char>(tenant.size());
  std::memcpy(buf + n, tenant.data(), std::min<size_t>(tenant.size(), 255));
  n += std::min<size_t>(tenant.size(), 255);
  std::memcpy(buf + n, key.data(), key.size());
  n += key.size();
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(buf, n, d);
  StoredKey out{};
  std::memcpy(out.data(), d, out.size());
  return out;
}

}  // namespace kvstash::server
