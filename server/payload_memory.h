// Request memory of a chunk payload: how many of its positions are kept uncompressed
// (raw) and how many bytes they take, read from the payload and codec headers
// (docs/format/payload.md, docs/format/dckv.md), never from sizes a client declares.
//
// Definitions (docs/protocol.md §5.7, "request memory"):
//   payload_bytes       whole payload as stored or sent: header (152 bytes) + codec body.
//   raw_positions       token positions stored uncompressed inside that payload:
//                         codec 0 raw: every position (`tokens`);
//                         codec 2 dckv, codec 4 kvtc: the body's raw_head_rows +
//                           raw_tail_rows (bf16 attention sinks and prefix tail);
//                         codecs 1, 3, 5 (spec, byte-plane, zstd): 0 (every position
//                           is entropy coded).
//   raw_position_bytes  their bytes: codec 0: layout.DataBytes(tokens) (the KV rows in
//                       the header's dtype; fp8 scales and the header are not
//                       positions); dckv/kvtc: raw_positions * 2 * n_layers *
//                       n_kv_heads * head_dim * 2 (bf16 K and V rows). A subset of
//                       payload_bytes.
// A request's memory is payload_bytes + state_bytes = (payload_bytes -
// raw_position_bytes) coded bytes + raw_position_bytes + state_bytes.
//
// Errors (MeasurePayload): whatever ParsePayloadHeader returns for a bad header;
// Corruption when the payload is shorter than its header says, or a dckv/kvtc body's
// row counts do not add up to the header's token count or its raw rows do not fit in
// the body. Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <span>

#include "kvstash/result.h"

namespace kvstash::server {

struct PayloadMemory {
  uint64_t payload_bytes = 0;
  uint32_t raw_positions = 0;
  uint64_t raw_position_bytes = 0;
};

// Measures a whole payload (header + body of header.body_bytes bytes). Does not check
// the body digest (the caller validated it, or the store did on read).
Result<PayloadMemory> MeasurePayload(std::span<const uint8_t> payload);

}  // namespace kvstash::server
