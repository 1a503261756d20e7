// Bodies of the kvstash protocol messages, one request and one reply type per opcode
// (docs/protocol.md has the byte layouts). Each type has
//   uint16_t Flags() const;                          // header flag bits it sets
//   void Encode(std::vector<uint8_t>* body) const;   // appends its body
//   static Result<T> Decode(uint16_t flags, std::span<const uint8_t> body);
// Decode never trusts a length: short, long (trailing bytes) or inconsistent bodies and
// unknown flag bits are Corruption / InvalidArgument, never UB. Decode(Encode(x)) == x.
//
// Keys on the wire are the 16-byte stored chunk keys of docs/format/keys.md, computed
// by the client. The server scopes every key by the connection's tenant before it
// touches the store, so the tenant is part of the namespace whatever a client sends.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstash/payload_format.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash::protocol {

// Size bounds enforced by Decode (the frame limit bounds everything else).
inline constexpr size_t kMaxTenantBytes = 255;
inline constexpr size_t kMaxCredentialBytes = 4096;
inline constexpr size_t kMaxLookupKeys = 65536;
inline constexpr size_t kMaxPingBytes = 65536;

// HELLO: the first request of every connection; binds it to a tenant.
struct HelloRequest {
  uint16_t protocol_version = 1;  // highest version the client speaks
  std::string tenant;             // 1..255 bytes
  std::string credential;         // 0..4096 bytes, the tenant's secret
  std::string client_name;        // free text for logs, 0..255 bytes

  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<HelloRequest> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const HelloRequest&) const = default;
};
struct HelloReply {
  uint16_t protocol_version = 1;  // version the server will speak
  uint32_t max_frame_body_bytes = 0;
  uint32_t max_in_flight = 0;     // requests a client may have outstanding
  std::string server_id;          // stable per server instance (rendezvous hashing)

  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<HelloReply> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const HelloReply&) const = default;
};

// One chunk of a prefix chain as LOOKUP sees it.
struct LookupKey {
  StoredKey key{};
  uint32_t tokens = 0;  // tokens in the chunk (for tokens-hit accounting)
  bool operator==(const LookupKey&) const = default;
};

// LOOKUP: longest run of consecutive present chunks from the start of `keys`.
inline constexpr uint16_t kLookupFlagRequireState = 1u << 0;  // end at a state record
struct LookupRequest {
  std::vector<LookupKey> keys;  // chain order, 0..65536 keys
  bool require_state = false;   // hybrid models: usable prefix ends at a state record

  uint16_t Flags() const { return require_state ? kLookupFlagRequireState : 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<LookupRequest> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const LookupRequest&) const = default;
};
struct LookupReply {
  uint32_t matched_chunks = 0;  // keys[0..matched_chunks) are present
  uint64_t matched_tokens = 0;  // sum of their tokens

  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<LookupReply> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const LookupReply&) const = default;
};

// Request memory of a reply (docs/protocol.md §5.7), sent when the request asked for
// it (kPutFlagMemory, kGetFlagMemory; the reply then has kReplyFlagMemory set).
// raw_positions / raw_position_bytes: positions kept uncompressed inside the payload
// (server/payload_memory.h); state_bytes: the state record's size.
inline constexpr uint16_t kReplyFlagMemory = 1u << 0;
struct ReplyMemory {
  uint32_t raw_positions = 0;
  uint64_t raw_position_bytes = 0;
  uint64_t state_bytes = 0;
  bool operator==(const ReplyMemory&) const = default;
};

// PUT: stores one chunk payload (and optionally the recurrent state at its end).
// `payload` is always a whole chunk payload (kvstash/payload_format.h). With
// kPutFlagRawKv it must be codec kRaw (canonical KV bytes) and the server encodes it
// with `target_codec` before storing; without it, it is stored as sent after
// validation (header, body digest, sizes).
inline constexpr uint16_t kPutFlagRawKv = 1u << 0;
inline constexpr uint16_t kPutFlagPin = 1u << 1;
// The body ends with u32 prefix_tokens (set when prefix_tokens != 0).
inline constexpr uint16_t kPutFlagPrefixTokens = 1u << 2;
// The reply carries the request memory (ReplyMemory).
inline constexpr uint16_t kPutFlagMemory = 1u << 3;
struct PutRequest {
  StoredKey key{};
  std::optional<StoredKey> parent;  // previous chunk of the chain (none for chunk 0)
  bool raw_kv = false;
  bool pin = false;
  CodecId target_codec = CodecId::kRaw;  // used with raw_kv
  std::vector<uint8_t> payload;
  std::vector<uint8_t> state_record;  // empty, or an EncodeStateRecord record
  // With raw_kv: tokens of the stored prefix this chunk belongs to (server-side dckv
  // keeps the prefix's last positions raw); 0 = the chunk ends the prefix.
  uint32_t prefix_tokens = 0;
  bool memory = false;  // ask for the reply's ReplyMemory

  uint16_t Flags() const;
  void Encode(std::vector<uint8_t>* body) const;
  static Result<PutRequest> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const PutRequest&) const = default;
};
// Body: u64 stored_bytes, and with kReplyFlagMemory u32 raw_positions,
// u64 raw_position_bytes, u64 state_bytes (of the stored payload and state record).
struct PutReply {
  uint64_t stored_bytes = 0;  // payload bytes as stored (after server-side encoding)
  std::optional<ReplyMemory> memory;

  uint16_t Flags() const { return memory ? kReplyFlagMemory : 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<PutReply> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const PutReply&) const = default;
};

// GET: one chunk's payload. With kGetFlagDecoded the reply holds the decoded chunk as
// a codec-kRaw payload (canonical KV bytes) instead of the stored encoding.
inline constexpr uint16_t kGetFlagDecoded = 1u << 0;
inline constexpr uint16_t kGetFlagWithState = 1u << 1;
inline constexpr uint16_t kGetFlagMemory = 1u << 2;  // reply carries ReplyMemory
struct GetRequest {
  StoredKey key{};
  bool decoded = false;
  bool with_state = false;
  bool memory = false;

  uint16_t Flags() const;
  void Encode(std::vector<uint8_t>* body) const;
  static Result<GetRequest> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const GetRequest&) const = default;
};
// Body layout: payload || state_record || [u32 raw_positions || u64 raw_position_bytes,
// with kReplyFlagMemory] || u32 state_bytes || u32 payload_bytes. The sizes trail the
// bytes so a receiver can keep the payload in the buffer it read the body into
// (DecodeOwned: no copy of a multi-megabyte payload). memory->state_bytes is not sent
// (it is the trailer's state_bytes): Encode requires it to equal state_record.size(),
// Decode sets it so.
struct GetReply {
  std::vector<uint8_t> payload;       // a whole chunk payload
  std::vector<uint8_t> state_record;  // empty unless asked for and present
  std::optional<ReplyMemory> memory;  // of the payload and state record returned

  uint16_t Flags() const { return memory ? kReplyFlagMemory : 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<GetReply> Decode(uint16_t flags, std::span<const uint8_t> body);
  // Same result as Decode, taking over `body`'s buffer for the payload.
  static Result<GetReply> DecodeOwned(uint16_t flags, std::vector<uint8_t>&& body);
  bool operator==(const GetReply&) const = default;
};

// DELETE: removes one chunk (and its state record).
struct DeleteRequest {
  StoredKey key{};

  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<DeleteRequest> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const DeleteRequest&) const = default;
};
struct DeleteReply {
  bool existed = false;

  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<DeleteReply> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const DeleteReply&) const = default;
};

// PIN: exempts a chunk from eviction (pin) or makes it evictable again (unpin).
inline constexpr uint16_t kPinFlagPin = 1u << 0;
struct PinRequest {
  StoredKey key{};
  bool pin = true;

  uint16_t Flags() const { return pin ? kPinFlagPin : 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<PinRequest> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const PinRequest&) const = default;
};
struct PinReply {
  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>*) const {}
  static Result<PinReply> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const PinReply&) const = default;
};

// STATS: the server's statistics as the JSON document of GET /v1/stats.
struct StatsRequest {
  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>*) const {}
  static Result<StatsRequest> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const StatsRequest&) const = default;
};
struct StatsReply {
  std::string json;

  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<StatsReply> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const StatsReply&) const = default;
};

// PING: the reply echoes the body (0..65536 bytes). Allowed before HELLO.
struct PingMessage {
  std::vector<uint8_t> data;

  uint16_t Flags() const { return 0; }
  void Encode(std::vector<uint8_t>* body) const;
  static Result<PingMessage> Decode(uint16_t flags, std::span<const uint8_t> body);
  bool operator==(const PingMessage&) const = default;
};

}  // namespace kvstash::protocol
