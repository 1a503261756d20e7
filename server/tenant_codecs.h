// TenantCodecs: the codecs the server runs itself for codec placement (docs/protocol.md
// §5.3-§5.4): encoding raw KV sent with PUT's raw_kv flag, and decoding for GET's
// decoded flag. Configured per tenant (the tenant is the namespace): a tenant's
// `dckv_artifact` file is loaded at start-up, parsed (DckvArtifact::Parse) and its
// SHA-256 checked against `dckv_artifact_sha256` (the digest dckv payload headers
// carry), so a server never codes a tenant's KV with an artifact nobody vouched for.
//
// What runs where
//   raw (codec 0)  encode/decode are the identity: always available.
//   dckv           self-contained given its artifact: encoded and decoded here (CPU).
//   spec           decoding needs the target model's predictor run over the prefix
//                  tokens, which never reach the server: spec payloads are coded and
//                  decoded where the model runs (the client). Asking the server is
//                  NotSupported with that reason.
//   others         NotSupported.
//
// Errors: Load: InvalidArgument for an unreadable artifact file, a digest that is not
//   64 hex digits or does not match, an artifact that does not parse or load.
//   Encode/Decode: NotSupported (see above, or no artifact configured for the
//   tenant / the payload's artifact is not the tenant's); the codec's own errors
//   (InvalidArgument for a chunk shape that is not the artifact's, Corruption for a
//   damaged payload, Mismatch).
// Thread-safety: immutable after Load; Encode/Decode may run concurrently.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/dckv/dckv_codec.h"
#include "kvstash/payload_format.h"
#include "kvstash/result.h"
#include "server/config.h"

namespace kvstash::server {

class TenantCodecs {
 public:
  static Result<TenantCodecs> Load(const std::vector<TenantConfig>& tenants);

  // Encodes the codec-kRaw payload `raw` (validated: canonical body, content checksum)
  // with `target` for `tenant`; a whole payload of codec `target`. prefix_tokens: the
  // length of the stored prefix the chunk belongs to (dckv keeps its last raw_tail
  // positions raw); 0 means the chunk ends the prefix.
  Result<std::vector<uint8_t>> Encode(const std::string& tenant, const PayloadView& raw,
                                      CodecId target, uint32_t prefix_tokens) const;
  // Decodes a stored payload of `tenant` to a codec-kRaw payload (same token_offset
  // and model fingerprint; flag lossy kept when the codec is lossy).
  Result<std::vector<uint8_t>> Decode(const std::string& tenant,
                                      std::span<const uint8_t> payload) const;

 private:
  std::map<std::string, std::shared_ptr<const dckv::DckvCodec>, std::less<>> dckv_;
};

}  // namespace kvstash::server
