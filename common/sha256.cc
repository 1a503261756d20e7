#include "common/sha256.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

namespace kvstash {

Digest256 Sha256(std::span<const uint8_t> data) {
  Digest256 d{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr) != 1) d.fill(0);
  return d;
}

Result<Digest256> Sha256File(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("cannot read " + path);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return Status::Internal("SHA-256 init");
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.bad()) return Status::IOError("read error in " + path);
    if (f.gcount() > 0 && EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(f.gcount())) != 1) {
      return Status::Internal("SHA-256 update");
    }
  }
  Digest256 d{};
  unsigned len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), d.data(), &len) != 1 || len != d.size()) return Status::Internal("SHA-256 final");
  return d;
}

}  // namespace kvstash
