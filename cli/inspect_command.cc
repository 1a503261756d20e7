// `kvstash inspect FILE`: prints the header of a stored chunk payload or
// recurrent-state record as JSON, after the same checks a decoder makes
// (docs/format/payload.md). Exit status 1 when the file does not verify (the tool's
// "the request failed"), 2 when it cannot be read; the message names the file.
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/client_flags.h"
#include "cli/command_registry.h"
#include "common/byte_io.h"
#include "kvstash/payload_format.h"

namespace kvstash::cli {
namespace {

int Run(const std::string& path) {
  // "kvstash inspect: FILE: Corruption: ..." on stderr; returns `code`.
  const auto fail = [&path](const std::string& what, int code) {
    std::cerr << "kvstash inspect: " << path << ": " << what << "\n";
    return code;
  };
  auto read = ReadFileBytes(path);
  if (!read.ok()) return fail(read.status().ToString(), 2);
  const std::vector<uint8_t>& bytes = *read;
  nlohmann::json j;
  j["file"] = path;
  j["bytes"] = bytes.size();
  if (bytes.size() >= 4 && bytes[3] == 'S' && bytes[2] == 'S') {
    auto rec = DecodeStateRecord(bytes);
    if (!rec.ok()) return fail(rec.status().ToString(), 1);
    j["kind"] = "recurrent_state";
    j["boundary_tokens"] = rec->state.boundary_tokens;
    j["model_fingerprint"] = ToHex(rec->model_fingerprint);
    j["state_bytes"] = rec->state.DataBytes();
    for (const StateTensor& t : rec->state.tensors) {
      j["tensors"].push_back({{"name", t.name}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape}});
    }
  } else {
    auto p = ParsePayload(bytes);
    if (!p.ok()) return fail(p.status().ToString(), 1);
    const PayloadHeader& h = p->header;
    if (h.codec == CodecId::kRaw) {
      // The body of a raw payload is the decoded chunk: verify its content checksum too.
      KvChunkView v{h.layout, h.tokens, p->body.first(std::min<size_t>(p->body.size(), h.layout.DataBytes(h.tokens))), {}};
      std::vector<float> scales(h.layout.NumScales());
      const size_t data = h.layout.DataBytes(h.tokens);
      if (p->body.size() != data + 4 * scales.size())
        return fail("Corruption: raw payload body size does not match its layout", 1);
      for (size_t i = 0; i < scales.size(); ++i) scales[i] = FromBits(LoadLe<uint32_t>(p->body.data() + data + 4 * i));
      v.scales = scales;
      if (v.ContentChecksum() != h.content_checksum)
        return fail("Corruption: raw payload content checksum mismatch", 1);
    }
    j["kind"] = "chunk_payload";
    j["codec_id"] = static_cast<int>(h.codec);
    j["partial"] = (h.flags & kPayloadFlagPartialChunk) != 0;
    j["lossy"] = (h.flags & kPayloadFlagLossy) != 0;
    j["layout"] = {{"n_layers", h.layout.n_layers}, {"n_kv_heads", h.layout.n_kv_heads},
                   {"head_dim", h.layout.head_dim}, {"dtype", DTypeName(h.layout.dtype)}};
    j["tokens"] = h.tokens;
    j["token_offset"] = h.token_offset;
    j["artifact_digest"] = ToHex(h.artifact_digest);
    j["model_fingerprint"] = ToHex(h.model_fingerprint);
    // The key a stored payload is bound to (format version 2); null for a codec's
    // unbound (version 1) payload.
    j["format_version"] = h.chunk_key ? kPayloadVersion : kPayloadVersionUnbound;
    j["chunk_key"] = h.chunk_key ? nlohmann::json(ToHex(*h.chunk_key)) : nlohmann::json(nullptr);
    j["content_checksum"] = h.content_checksum;
    j["body_bytes"] = h.body_bytes;
    const double raw = static_cast<double>(h.layout.DataBytes(h.tokens));
    // Decoded canonical bytes over stored bytes (header included): the compression ratio.
    j["ratio_vs_decoded"] = raw / static_cast<double>(bytes.size());
  }
  std::cout << j.dump(1) << "\n";
  return 0;
}

const bool kRegistered = RegisterCommand(
    "inspect", "Verify and print the header of a stored payload or state record (exit 1: it does not verify)",
    [](CLI::App* cmd) {
      auto path = std::make_shared<std::string>();
      cmd->add_option("file", *path, "Payload (.kvsp) or state record file")->required();
      return [path] { return Run(*path); };
    });

}  // namespace
}  // namespace kvstash::cli
