#include "kvstash/sha256.h"

#include <openssl/evp.h>

#include <fstream>
#include <vector>

namespace kvstash {

Digest256 Sha256(std::span<const uint8_t> data) {
  Digest256 d{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr) != 1) d.fill(0);
  return d;
}

Result<Digest256> Sha256File(const std::string& path) {
  Sha256Stream h;
  KVSTASH_RETURN_IF_ERROR(h.UpdateFromFile(path));
  return h.Finish();
}

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()), status_(Status::Ok()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    status_ = Status::Internal("SHA-256 init");
  }
}

Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256Stream::Update(std::span<const uint8_t> data) {
  if (!status_.ok() || data.empty()) return;
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size()) != 1) {
    status_ = Status::Internal("SHA-256 update");
  }
}

Status Sha256Stream::UpdateFromFile(const std::string& path) {
  if (!status_.ok()) return status_;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    status_ = Status::NotFound("cannot read " + path);
    return status_;
  }
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.bad()) {
      status_ = Status::IOError("read error in " + path);
      return status_;
    }
    Update({reinterpret_cast<const uint8_t*>(buf.data()), static_cast<size_t>(f.gcount())});
  }
  return status_;
}

Result<Digest256> Sha256Stream::Finish() {
  if (!status_.ok()) return status_;
  Digest256 d{};
  unsigned len = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.data(), &len) != 1 || len != d.size()) {
    status_ = Status::Internal("SHA-256 final");
    return status_;
  }
  status_ = Status::Internal("Sha256Stream::Finish called twice");
  return d;
}

}  // namespace kvstash
