// A token range of a canonical KV chunk (kvstash/kv_chunk.h) as a chunk of its own: the
// engine session (engines/session) cuts an exported prefix at chunk boundaries and a
// restored one at the tokens it imports.
// Thread-safety: a pure function over caller-owned chunks.
#pragma once

#include <cstdint>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash {

// Tokens [begin, begin + count) of `chunk` as a chunk of `count` tokens: same layout and
// scales, K and V of each layer copied. Errors: InvalidArgument for an invalid chunk,
// count 0 or a range beyond chunk.tokens.
Result<KvChunk> SliceTokens(const KvChunk& chunk, uint32_t begin, uint32_t count);

}  // namespace kvstash
