#include "server/tenants.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

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

namespace {

// SHA-256 of `parts` concatenated, through one EVP_MD fetched once and a per-thread
// context reused across calls: OpenSSL 3's one-shot SHA256() fetches the algorithm and
// allocates a context on every call, which dominated LOOKUP's CPU on the server.
void Sha256Parts(std::initializer_list<std::span<const unsigned char>> parts,
                 unsigned char out[SHA256_DIGEST_LENGTH]) {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  struct CtxDeleter {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  thread_local std::unique_ptr<EVP_MD_CTX, CtxDeleter> ctx(EVP_MD_CTX_new());
  unsigned int len = 0;
  bool ok = md != nullptr && ctx != nullptr && EVP_DigestInit_ex2(ctx.get(), md, nullptr) == 1;
  for (auto p : parts) ok = ok && EVP_DigestUpdate(ctx.get(), p.data(), p.size()) == 1;
  ok = ok && EVP_DigestFinal_ex(ctx.get(), out, &len) == 1;
  if (!ok) {  // no usable EVP provider: the one-shot form (same digest, slower)
    std::vector<unsigned char> all;
    for (auto p : parts) all.insert(all.end(), p.begin(), p.end());
    SHA256(all.data(), all.size(), out);
  }
}

}  // namespace

StoredKey ScopeKey(std::string_view tenant, const StoredKey& key) {
  static constexpr std::string_view kTag = "kvstash.tenant-key.v1";
  unsigned char prefix[64 + 256];
  size_t n = 0;
  std::memcpy(prefix, kTag.data(), kTag.size());
  n += kTag.size();
  const size_t tn = std::min<size_t>(tenant.size(), 255);
  prefix[n++] = static_cast<unsigned char>(tn);
  std::memcpy(prefix + n, tenant.data(), tn);
  n += tn;
  unsigned char d[SHA256_DIGEST_LENGTH];
  Sha256Parts({std::span<const unsigned char>(prefix, n),
               std::span<const unsigned char>(key.data(), key.size())},
              d);
  StoredKey out{};
  std::memcpy(out.data(), d, out.size());
  return out;
}

}  // namespace kvstash::server
