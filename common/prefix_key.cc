#include "kvstash/prefix_key.h"

#include <openssl/evp.h>

#include <memory>

#include "common/byte_io.h"

namespace kvstash {
namespace {

// Versioned domain string: field 0x00 of every namespace encoding.
constexpr std::string_view kNamespaceVersion = "kvstash-namespace-v1";
constexpr uint8_t kFullChunkKind = 0x01;
constexpr uint8_t kPartialChunkKind = 0x02;

void PutField(ByteWriter& w, NamespaceTag tag, std::span<const uint8_t> value) {
  w.U8(static_cast<uint8_t>(tag));
  w.U32(static_cast<uint32_t>(value.size()));
  w.Bytes(value);
}

void PutField(ByteWriter& w, NamespaceTag tag, std::string_view value) {
  PutField(w, tag, std::span(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
}

void PutU32Field(ByteWriter& w, NamespaceTag tag, std::initializer_list<uint32_t> values) {
  std::vector<uint8_t> v;
  ByteWriter vw(&v);
  for (uint32_t x : values) vw.U32(x);
  PutField(w, tag, v);
}

const EVP_MD* Sha256() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

Status Namespace::Validate() const {
  KVSTASH_RETURN_IF_ERROR(layout.Validate().WithContext("namespace layout"));
  if (chunk_tokens == 0 || chunk_tokens > kMaxChunkTokens) {
    return Status::InvalidArgument("namespace chunk_tokens " + std::to_string(chunk_tokens) +
                                   " outside 1.." + std::to_string(kMaxChunkTokens));
  }
  if (tp_size == 0 || tp_rank >= tp_size) {
    return Status::InvalidArgument("namespace tensor-parallel rank " +
                                   std::to_string(tp_rank) + " not below size " +
                                   std::to_string(tp_size));
  }
  return Status::Ok();
}

std::vector<uint8_t> EncodeNamespace(const Namespace& s) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  PutField(w, NamespaceTag::kVersion, kNamespaceVersion);
  PutField(w, NamespaceTag::kModelFingerprint, s.model_fingerprint);
  PutField(w, NamespaceTag::kKvDtype, DTypeName(s.layout.dtype));
  PutU32Field(w, NamespaceTag::kLayout, {s.layout.n_layers, s.layout.n_kv_heads, s.layout.head_dim});
  PutU32Field(w, NamespaceTag::kChunkTokens, {s.chunk_tokens});
  PutU32Field(w, NamespaceTag::kTensorParallel, {s.tp_rank, s.tp_size});
  PutField(w, NamespaceTag::kAdapterName, s.adapter_name);
  PutField(w, NamespaceTag::kAdapterId, s.adapter_id);
  PutField(w, NamespaceTag::kAdapterDigest, s.adapter_digest);
  PutField(w, NamespaceTag::kCacheSalt, s.cache_salt);
  PutField(w, NamespaceTag::kTenant, s.tenant);
  PutField(w, NamespaceTag::kCodecId, s.codec_id);
  PutField(w, NamespaceTag::kCodecArtifactDigest, s.codec_artifact_digest);
  return out;
}

Result<Digest256> NamespaceDigest(const Namespace& spec) {
  KVSTASH_RETURN_IF_ERROR(spec.Validate());
  const std::vector<uint8_t> msg = EncodeNamespace(spec);
  Digest256 d{};
  unsigned int len = 0;
  if (EVP_Digest(msg.data(), msg.size(), d.data(), &len, Sha256(), nullptr) != 1 ||
      len != d.size()) {
    return Status::Internal("OpenSSL SHA-256 failed");
  }
  return d;
}

StoredKey ChunkKey::stored() const {
  StoredKey k{};
  std::copy(digest.begin(), digest.begin() + k.size(), k.begin());
  return k;
}

Result<std::vector<ChunkKey>> ComputeChunkKeys(
    const Digest256& ns, std::span<const uint32_t> tokens, uint32_t chunk_tokens,
    bool include_partial, std::span<const std::vector<std::string>> extra_keys) {
  if (chunk_tokens == 0) return Status::InvalidArgument("chunk_tokens must be > 0");
  const size_t full = tokens.size() / chunk_tokens;
  const bool has_partial = include_partial && tokens.size() % chunk_tokens != 0;
  const size_t n_chunks = full + (has_partial ? 1 : 0);
  if (!extra_keys.empty() && extra_keys.size() != n_chunks) {
    return Status::InvalidArgument("extra_keys has " + std::to_string(extra_keys.size()) +
                                   " entries for " + std::to_string(n_chunks) + " chunks");
  }
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx) return Status::Internal("EVP_MD_CTX_new failed");

  std::vector<ChunkKey> keys(n_chunks);
  std::vector<uint8_t> buf;
  const Digest256* parent = &ns;
  for (size_t i = 0; i < n_chunks; ++i) {
    const size_t begin = i * chunk_tokens;
    const size_t n = std::min<size_t>(chunk_tokens, tokens.size() - begin);
    ChunkKey& key = keys[i];
    key.tokens = static_cast<uint32_t>(n);
    key.partial = n < chunk_tokens;

    buf.clear();
    ByteWriter w(&buf);
    w.U8(key.partial ? kPartialChunkKind : kFullChunkKind);
    w.Bytes(*parent);
    w.U32(static_cast<uint32_t>(n));
    // Tokens as little-endian u32 (x86 and Arm hosts are little-endian, but spell it out).
    buf.resize(buf.size() + 4 * n);
    uint8_t* p = buf.data() + buf.size() - 4 * n;
    for (size_t t = 0; t < n; ++t) StoreLe<uint32_t>(p + 4 * t, tokens[begin + t]);
    if (extra_keys.empty()) {
      w.U32(0);
    } else {
      w.U32(static_cast<uint32_t>(extra_keys[i].size()));
      for (const std::string& e : extra_keys[i]) {
        w.U32(static_cast<uint32_t>(e.size()));
        w.Bytes(e);
      }
    }
    unsigned int len = 0;
    if (EVP_DigestInit_ex(ctx.get(), Sha256(), nullptr) != 1 ||
        EVP_DigestUpdate(ctx.get(), buf.data(), buf.size()) != 1 ||
        EVP_DigestFinal_ex(ctx.get(), key.digest.data(), &len) != 1) {
      return Status::Internal("OpenSSL SHA-256 failed");
    }
    parent = &key.digest;
  }
  return keys;
}

std::string ToHex(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

}  // namespace kvstash
