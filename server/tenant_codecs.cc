#include "server/tenant_codecs.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/checksum.h"

namespace kvstash::server {
namespace {

Result<Digest256> ParseHexDigest(const std::string& hex) {
  Digest256 d{};
  if (hex.size() != 2 * d.size()) return Status::InvalidArgument("not 64 hex digits");
  for (size_t i = 0; i < d.size(); ++i) {
    uint8_t v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      const int n = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (n < 0) return Status::InvalidArgument("not 64 hex digits");
      v = static_cast<uint8_t>(v * 16 + n);
    }
    d[i] = v;
  }
  return d;
}

const char* CodecLabel(CodecId c) {
  switch (c) {
    case CodecId::kRaw: return "raw";
    case CodecId::kSpec: return "spec";
    case CodecId::kDckv: return "dckv";
    default: return "this codec";
  }
}

Status SpecNotHere() {
  return Status::NotSupported(
      "spec payloads are coded and decoded where the model runs (the client): decoding "
      "needs the target model's predictor over the prefix tokens, which the server never "
      "receives");
}

}  // namespace

Result<TenantCodecs> TenantCodecs::Load(const std::vector<TenantConfig>& tenants) {
  TenantCodecs out;
  for (const TenantConfig& t : tenants) {
    if (t.dckv_artifact.empty()) continue;
    const std::string where = "tenant \"" + t.name + "\" dckv_artifact " + t.dckv_artifact;
    auto want = ParseHexDigest(t.dckv_artifact_sha256);
    if (!want.ok()) return Status::InvalidArgument(where + ": dckv_artifact_sha256 is not 64 hex digits");
    std::error_code ec;
    if (!std::filesystem::is_regular_file(t.dckv_artifact, ec)) return Status::InvalidArgument(where + ": not a regular file");
    std::ifstream in(t.dckv_artifact, std::ios::binary);
    if (!in) return Status::InvalidArgument(where + ": cannot open");
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    auto artifact = dckv::DckvArtifact::Parse(bytes);
    if (!artifact.ok()) return Status::InvalidArgument(where + ": " + artifact.status().ToString());
    const Digest256 have = artifact->Digest();
    if (have != *want) {
      return Status::InvalidArgument(where + ": SHA-256 is " + ToHex(have) +
                                     ", the config expects " + t.dckv_artifact_sha256);
    }
    auto codec = dckv::DckvCodec::Create(std::move(artifact).value());
    if (!codec.ok()) return Status::InvalidArgument(where + ": " + codec.status().ToString());
    out.dckv_[t.name] = std::make_shared<const dckv::DckvCodec>(std::move(codec).value());
  }
  return out;
}

Result<std::vector<uint8_t>> TenantCodecs::Encode(const std::string& tenant, const PayloadView& raw,
                                                  CodecId target, uint32_t prefix_tokens) const {
  if (target == CodecId::kSpec) return SpecNotHere();
  if (target != CodecId::kDckv) {
    return Status::NotSupported(std::string("server-side encoding with ") + CodecLabel(target) +
                                " (codec " + std::to_string(static_cast<int>(target)) +
                                ") is not available (raw and dckv are)");
  }
  auto it = dckv_.find(tenant);
  if (it == dckv_.end()) {
    return Status::NotSupported("no dckv artifact is configured for this tenant "
                                "(server config tenants[].dckv_artifact)");
  }
  const PayloadHeader& h = raw.header;
  const uint32_t end = h.token_offset + h.tokens;
  if (prefix_tokens == 0) prefix_tokens = end;
  if (prefix_tokens < end) {
    return Status::InvalidArgument("prefix_tokens " + std::to_string(prefix_tokens) +
                                   " ends before the chunk (tokens " +
                                   std::to_string(h.token_offset) + ".." + std::to_string(end) + ")");
  }
  const uint64_t data_bytes = h.layout.DataBytes(h.tokens);
  std::vector<float> scales(h.layout.NumScales());
  if (!scales.empty()) {  // fp8 only; memcpy must not see bf16's empty (null) buffer
    std::memcpy(scales.data(), raw.body.data() + data_bytes, scales.size() * sizeof(float));
  }
  const KvChunkView view{h.layout, h.tokens, raw.body.first(data_bytes), scales};
  return it->second->Encode(view, h.token_offset, prefix_tokens, h.model_fingerprint);
}

Result<std::vector<uint8_t>> TenantCodecs::Decode(const std::string& tenant,
                                                  std::span<const uint8_t> payload) const {
  KVSTASH_ASSIGN_OR_RETURN(PayloadHeader h, ParsePayloadHeader(payload));
  if (h.codec == CodecId::kRaw) return std::vector<uint8_t>(payload.begin(), payload.end());
  if (h.codec == CodecId::kSpec) return SpecNotHere();
  if (h.codec != CodecId::kDckv) {
    return Status::NotSupported(std::string("decoding codec ") +
                                std::to_string(static_cast<int>(h.codec)) +
                                " on the server is not available (raw and dckv are)");
  }
  auto it = dckv_.find(tenant);
  if (it == dckv_.end() || it->second->digest() != h.artifact_digest) {
    return Status::NotSupported("this dckv payload's artifact " + ToHex(h.artifact_digest) +
                                " is not the one configured for this tenant; decode it on the "
                                "client");
  }
  KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, it->second->Decode(payload, h.model_fingerprint));
  PayloadHeader out;
  out.codec = CodecId::kRaw;
  out.flags = h.flags;  // partial-chunk and lossy (the values are the lossy reconstruction)
  out.layout = chunk.layout;
  out.tokens = chunk.tokens;
  out.token_offset = h.token_offset;
  out.model_fingerprint = h.model_fingerprint;
  out.content_checksum = chunk.ContentChecksum();
  out.chunk_key = h.chunk_key;  // the decoded payload stays bound to the stored one's key
  std::vector<uint8_t> body(chunk.data);
  const auto* s = reinterpret_cast<const uint8_t*>(chunk.scales.data());
  body.insert(body.end(), s, s + chunk.scales.size() * sizeof(float));
  return BuildPayload(out, body);
}

}  // namespace kvstash::server
