// Test payloads: codec-kRaw chunk payloads with deterministic contents, and keys.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/checksum.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/payload_format.h"
#include "kvstash/prefix_key.h"

namespace kvstash::server::testing {

// A small bf16 layout (2 layers, 2 KV heads, head_dim 8): 128 bytes per token.
inline KvLayout SmallLayout() { return KvLayout{2, 2, 8, DType::kBF16}; }

// The codec-kRaw payload of chunk `c`.
inline std::vector<uint8_t> RawPayloadOf(const KvChunk& c) {
  PayloadHeader h;
  h.codec = CodecId::kRaw;
  h.layout = c.layout;
  h.tokens = c.tokens;
  h.content_checksum = c.ContentChecksum();
  return BuildPayload(h, c.data).value();
}

// `payload` bound to `key` (format version 2): what kvstash::Client::Put sends, and a
// GET of `key` returns, for the unbound payload a codec or RawPayload writes.
inline std::vector<uint8_t> Bound(const std::vector<uint8_t>& payload, const StoredKey& key) {
  return BindPayloadToKey(payload, key).value();
}

// A codec-kRaw payload of `tokens` tokens whose bytes depend on `seed` (unbound: format
// version 1, 136-byte header).
inline std::vector<uint8_t> RawPayload(uint32_t tokens, uint32_t seed,
                                       KvLayout layout = SmallLayout()) {
  KvChunk c = KvChunk::Zeros(layout, tokens);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : c.data) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return RawPayloadOf(c);
}

// A codec-kRaw payload whose KV bytes are a function of every byte of `key` (a
// SplitMix64 stream seeded from it): a GET that returns any other key's chunk differs.
inline std::vector<uint8_t> KeyedPayload(const StoredKey& key, uint32_t tokens,
                                         KvLayout layout = SmallLayout()) {
  KvChunk c = KvChunk::Zeros(layout, tokens);
  uint64_t s = 0;
  std::memcpy(&s, key.data(), 8);
  uint64_t t = 0;
  std::memcpy(&t, key.data() + 8, 8);
  s ^= t * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < c.data.size(); i += 8) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(c.data.data() + i, &z, std::min<size_t>(8, c.data.size() - i));
  }
  return RawPayloadOf(c);
}

inline StoredKey Key(uint32_t i) {
  StoredKey k{};
  for (size_t j = 0; j < k.size(); ++j) k[j] = static_cast<uint8_t>((i >> (8 * (j % 4))) + j * 17);
  return k;
}

}  // namespace kvstash::server::testing
