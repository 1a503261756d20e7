// Test payloads: codec-kRaw chunk payloads with deterministic contents, and keys.
#pragma once

#include <cstring>
#include <vector>

#include "common/checksum.h"
#include "common/kv_chunk.h"
#include "common/payload_format.h"
#include "common/prefix_key.h"

namespace kvstash::server::testing {

// A small bf16 layout (2 layers, 2 KV heads, head_dim 8): 128 bytes per token.
inline KvLayout SmallLayout() { return KvLayout{2, 2, 8, DType::kBF16}; }

// A codec-kRaw payload of `tokens` tokens whose bytes depend on `seed`.
inline std::vector<uint8_t> RawPayload(uint32_t tokens, uint32_t seed,
                                       KvLayout layout = SmallLayout()) {
  KvChunk c = KvChunk::Zeros(layout, tokens);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : c.data) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  PayloadHeader h;
  h.codec = CodecId::kRaw;
  h.layout = layout;
  h.tokens = tokens;
  h.content_checksum = c.ContentChecksum();
  return BuildPayload(h, c.data).value();
}

inline StoredKey Key(uint32_t i) {
  StoredKey k{};
  for (size_t j = 0; j < k.size(); ++j) k[j] = static_cast<uint8_t>((i >> (8 * (j % 4))) + j * 17);
  return k;
}

}  // namespace kvstash::server::testing
