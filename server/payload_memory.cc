#include "server/payload_memory.h"

#include <string>

#include "common/byte_io.h"
#include "kvstash/payload_format.h"

namespace kvstash::server {
namespace {

// "DCKB" as the bytes of a little-endian u32 (dckv_codec.h body layout).
constexpr uint32_t kDckvBodyMagic = 0x424B4344;
// dckv: magic, raw_head_rows, raw_tail_rows, coded_rows, flags.
constexpr uint64_t kDckvBodyHeaderBytes = 20;
// kvtc: raw_head_rows, raw_tail_rows, coded_rows; the rows are followed by u64 packed bytes.
constexpr uint64_t kKvtcBodyHeaderBytes = 12;
constexpr uint64_t kBf16Bytes = 2;

struct RowSplit {
  uint32_t head = 0, tail = 0, coded = 0;
};

// Reads three u32 row counts at `at` of the body and checks they add up to `tokens`.
Result<RowSplit> ReadSplit(std::span<const uint8_t> body, size_t at, uint32_t tokens,
                           const char* codec) {
  RowSplit s;
  s.head = LoadLe<uint32_t>(body.data() + at);
  s.tail = LoadLe<uint32_t>(body.data() + at + 4);
  s.coded = LoadLe<uint32_t>(body.data() + at + 8);
  if (uint64_t{s.head} + s.tail + s.coded != tokens) {
    return Status::Corruption(std::string(codec) + " payload body: " + std::to_string(s.head) +
                              " + " + std::to_string(s.tail) + " + " + std::to_string(s.coded) +
                              " rows, the header has " + std::to_string(tokens) + " tokens");
  }
  return s;
}

}  // namespace

Result<PayloadMemory> MeasurePayload(std::span<const uint8_t> payload) {
  KVSTASH_ASSIGN_OR_RETURN(PayloadHeader h, ParsePayloadHeader(payload));
  if (payload.size() - h.header_bytes() != h.body_bytes) {
    return Status::Corruption("payload of " + std::to_string(payload.size()) +
                              " bytes, its header says " + std::to_string(h.header_bytes()) +
                              " + " + std::to_string(h.body_bytes));
  }
  const std::span<const uint8_t> body = payload.subspan(h.header_bytes());
  PayloadMemory m;
  m.payload_bytes = payload.size();
  const uint64_t bf16_row = h.layout.ScalarsPerToken() * kBf16Bytes;
  uint64_t fixed = 0;  // body bytes besides the raw rows that must be present
  RowSplit split;
  switch (h.codec) {
    case CodecId::kRaw:
      m.raw_positions = h.tokens;
      m.raw_position_bytes = h.layout.DataBytes(h.tokens);
      if (m.raw_position_bytes > body.size()) {
        return Status::Corruption("raw payload body shorter than its " +
                                  std::to_string(h.tokens) + " positions");
      }
      return m;
    case CodecId::kDckv: {
      if (body.size() < kDckvBodyHeaderBytes || LoadLe<uint32_t>(body.data()) != kDckvBodyMagic) {
        return Status::Corruption("dckv payload body has no DCKB header");
      }
      KVSTASH_ASSIGN_OR_RETURN(split, ReadSplit(body, 4, h.tokens, "dckv"));
      // Token ids (bit 0) take at least 2 bytes per coded row (u16 or u32 by vocabulary).
      const bool ids = (LoadLe<uint32_t>(body.data() + 16) & 1u) != 0;
      fixed = kDckvBodyHeaderBytes + (ids ? uint64_t{split.coded} * 2 : 0);
      break;
    }
    case CodecId::kKvtc: {
      if (body.size() < kKvtcBodyHeaderBytes) {
        return Status::Corruption("kvtc payload body shorter than its row counts");
      }
      KVSTASH_ASSIGN_OR_RETURN(split, ReadSplit(body, 0, h.tokens, "kvtc"));
      fixed = kKvtcBodyHeaderBytes + sizeof(uint64_t);
      break;
    }
    default:
      return m;  // spec, byte-plane, zstd: every position is coded
  }
  m.raw_positions = split.head + split.tail;
  m.raw_position_bytes = uint64_t{m.raw_positions} * bf16_row;
  if (fixed + m.raw_position_bytes > body.size()) {
    return Status::Corruption("payload body of " + std::to_string(body.size()) + " bytes cannot hold " +
                              std::to_string(m.raw_positions) + " raw bf16 rows of " +
                              std::to_string(bf16_row) + " bytes");
  }
  return m;
}

}  // namespace kvstash::server
