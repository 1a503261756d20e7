// Frames of the kvstash binary protocol (docs/protocol.md): the fixed 32-byte header
// that precedes every request and reply on the TCP port, and the opcodes.
//
// READ ME FIRST
// - Every integer is little-endian. A frame is a 32-byte header followed by exactly
//   `body_bytes` bytes of body.
// - The header ends with a CRC32C of its first 28 bytes; the body has its own CRC32C
//   in the header. A receiver checks both before acting on a frame.
// - A reply has the request's opcode with bit 7 set and the request's request_id;
//   replies to pipelined requests may arrive in any order.
// - A reply whose status is not Ok carries the error message (UTF-8) as its body.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::protocol {

inline constexpr uint32_t kFrameMagic = 0x4653564B;  // bytes "KVSF"
inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr uint8_t kReplyBit = 0x80;
// Largest frame body a server accepts before the connection's HELLO succeeded (HELLO
// and PING bodies are a few KiB at most), so that an unauthenticated client cannot
// make the server buffer max_frame_bytes per connection. Larger frames get
// ResourceExhausted and the connection closes (docs/protocol.md §3).
inline constexpr uint32_t kMaxUnauthenticatedBodyBytes = 64u << 10;

// Request opcodes. Values are on the wire: never renumber (docs/protocol.md).
enum class Opcode : uint8_t {
  kHello = 0x01,
  kLookup = 0x02,
  kPut = 0x03,
  kGet = 0x04,
  kDelete = 0x05,
  kPin = 0x06,
  kStats = 0x07,
  kPing = 0x08,
};
inline constexpr int kNumOpcodes = 8;

// True for a byte that names a request opcode (reply bit clear).
bool IsRequestOpcode(uint8_t raw);
// "HELLO", "LOOKUP", ...; "UNKNOWN" for anything else. Ignores the reply bit.
std::string_view OpcodeName(uint8_t raw);
// Dense index 0..kNumOpcodes-1 of a valid opcode (for per-opcode metrics).
inline int OpcodeIndex(Opcode op) { return static_cast<int>(op) - 1; }

// The decoded fixed header.
struct FrameHeader {
  uint8_t version = kProtocolVersion;
  uint8_t opcode = 0;        // Opcode, | kReplyBit on replies
  uint16_t flags = 0;        // opcode-specific flag bits (docs/protocol.md)
  uint64_t request_id = 0;   // chosen by the client, echoed by the reply
  uint32_t body_bytes = 0;   // bytes following the header
  uint32_t body_crc32c = 0;  // CRC32C of the body (0 for an empty body)
  uint8_t status = 0;        // Status::Code of a reply; 0 in requests

  bool is_reply() const { return (opcode & kReplyBit) != 0; }
  bool operator==(const FrameHeader&) const = default;
};

// Writes the 32-byte header into `out` (computing the header CRC). The caller sets
// body_bytes and body_crc32c (AppendFrame does both).
void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);

// Parses a 32-byte header. Errors: Corruption for a wrong magic, a header CRC
// mismatch or nonzero reserved bytes; NotSupported for another protocol version.
// Opcode and size limits are checked by the caller (FrameParser).
Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes> bytes);

// Appends header + body to `out`, filling header.body_bytes and body_crc32c.
// REQUIRES: body.size() < 2^32.
void AppendFrame(FrameHeader header, std::span<const uint8_t> body, std::vector<uint8_t>* out);

// A complete frame: the header and its body.
struct Frame {
  FrameHeader header;
  std::vector<uint8_t> body;
};

// The reply frame for a request that failed: status code in the header, the message
// as body.
void AppendErrorReply(uint8_t request_opcode, uint64_t request_id, const Status& status,
                      std::vector<uint8_t>* out);

}  // namespace kvstash::protocol
